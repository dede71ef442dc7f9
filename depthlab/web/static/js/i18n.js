// The page's languages. The sentences are not here: each language's table comes from
// depthlab/locales/<lang>/*.json, merged by the server (GET api/locale/{lang}) or
// embedded in a static copy, and elements carry data-i18n="key" while figures call
// DL.t(key, values). Numbers never live in a table: they come from the API (or the
// embedded data) and are formatted by DL.fmt before they fill a template's {name}.
(function () {
  "use strict";
  const DL = (window.DL = window.DL || {});

  const tables = {}; // lang -> {key: template}, as the server merged it
  let lang = "en";
  let dataRules = null; // the English templates of the words inside project data, as regexes

  const fill = (template, vars) =>
    vars ? template.replace(/\{(\w+)\}/g, (m, k) => (k in vars ? String(vars[k]) : m)) : template;

  // DL.t("read.grad", {n: 40, ...}) fills {n} and the other named holes.
  DL.t = (key, vars) => {
    const s = (tables[lang] || {})[key];
    return s == null ? key : fill(s, vars);
  };
  DL.hasKey = (k) => k in (tables[lang] || {});
  // A count in words: KEY.one, KEY.two, ... by the language's plural rule for n (Intl.PluralRules:
  // "1 layer" but "2 layers"; Chinese has one form), KEY when the table has no such form.
  DL.tn = (key, n, vars) => {
    const form = key + "." + new Intl.PluralRules(lang === "zh" ? "zh-CN" : "en").select(n);
    return DL.t(DL.hasKey(form) ? form : key, Object.assign({ n }, vars));
  };
  // {en, zh} objects from export.json and the API.
  DL.tr = (obj) => (obj == null ? "" : typeof obj === "string" ? obj : obj[lang] || obj.en || "");
  DL.lang = () => lang;
  DL.defaultLang = () => ((navigator.language || "en").toLowerCase().startsWith("zh") ? "zh" : "en");

  // Make `l` the page's language: fetch its table (and the English one, which names the
  // words inside project data) from the data source once, then relabel every data-i18n element.
  DL.useLang = async (l, source) => {
    const want = l === "zh" ? "zh" : "en";
    for (const x of new Set(["en", want])) if (!tables[x]) tables[x] = await source.locale(x);
    lang = want;
    document.documentElement.lang = lang === "zh" ? "zh-CN" : "en";
    document.querySelectorAll("[data-i18n]").forEach((el) => {
      el.textContent = DL.t(el.dataset.i18n);
    });
  };

  // Words inside the project data (series labels, table headers and cells: export.json
  // keeps them in English) are the English side of the table's `data.*` templates
  // ("{n} layers" -> "{n} 层"). A label is translated whole or part by part
  // ("12 layers, no residual" -> "12 层,无残差"); what no template matches stays as it is.
  function rules() {
    if (dataRules) return dataRules;
    const escape = (s) => s.replace(/[.*+?^$()|[\]\\]/g, "\\$&");
    dataRules = Object.entries(tables.en).filter(([k]) => k.startsWith("data.") && !k.startsWith("data.column."))
      .map(([key, template]) => {
        const names = [];
        const body = escape(template).replace(/\{(\w+)\}/g, (m, name) => { names.push(name); return "(.+?)"; });
        return { key, names, re: new RegExp("^" + body + "$") };
      });
    return dataRules;
  }
  function dataWord(s) {
    for (const { key, names, re } of rules()) {
      const m = re.exec(s);
      if (m) return DL.t(key, Object.fromEntries(names.map((n, i) => [n, m[i + 1]])));
    }
    return null;
  }
  DL.trData = (s, column) => {
    if (lang === "en" || typeof s !== "string") return s;
    const header = "data.column." + s;
    if (column && DL.hasKey(header)) return DL.t(header); // as a table header, not a cell's value
    const whole = dataWord(s);
    if (whole != null) return whole;
    const parts = s.split(", ");
    return parts.length > 1 ? parts.map((p) => dataWord(p) || p).join(DL.t("b.d.sep")) : s;
  };
})();
