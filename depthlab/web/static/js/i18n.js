// The page's two languages. Every visible sentence lives here, keyed; elements carry
// data-i18n="key" and figures call DL.t(key). Numbers never live here: they come
// from the API (or the embedded data of a static copy) and are formatted by DL.fmt.
(function () {
  "use strict";
  const DL = (window.DL = window.DL || {});

  const S = {
    crumb: ["depthlab · one Transformer block · lesson 2", "depthlab · 一个 Transformer 块 · 第 2 课"],
    "lang.switch": ["中文", "English"],
    title: ["The residual connection: each layer learns a change",
            "残差连接:每一层只学一个改动"],
    question: ["If we stack attention and FFN sublayers directly, one on top of the other, what goes wrong as the stack gets deep?",
               "把注意力和 FFN 子层一个压一个地直接叠起来,叠得越深,会坏在哪里?"],
    intro: ["Every number on this page is computed by depthlab on your machine: the simulator runs random stacks live, the arithmetic is exact, and the project charts are the course model's own training logs.",
            "这一页上的每个数都由 depthlab 在你的机器上算出:模拟器现场跑随机初始化的堆叠,算术部分是精确值,项目图表来自课程模型自己的训练日志。"],
    not_yet: ["Left for later lessons: normalization as a topic of its own, why Post-LN needs warmup, and widening the stream into several streams.",
              "留给后面的课:归一化本身、Post-LN 为什么需要 warmup、把一条残差流拓宽成多条。"],

    "flow.h": ["Where we start: the data flow so far", "从已有出发:到目前为止的数据流"],
    "flow.p": ["A sentence of T tokens becomes a [T × d] matrix. Attention and the FFN both map [T × d] to [T × d], so blocks can be stacked; the naive way feeds each sublayer's output straight into the next one. Click a stage to see its shape and parameters.",
               "一句 T 个 token 的话变成 [T × d] 的矩阵。注意力和 FFN 都是 [T × d] → [T × d],所以块可以一层层叠;最直接的叠法就是把上一个子层的输出直接交给下一个。点一个环节,看它的形状和参数量。"],
    "flow.model": ["Model", "模型"],
    "flow.params": ["parameters", "参数"],
    "flow.shape": ["shape", "形状"],
    "flow.tokens": ["tokens", "个 token"],
    "flow.total": ["total", "合计"],
    "flow.layers": ["layers", "层"],
    "flow.blocks": ["blocks", "层"],
    "flow.tied": ["shared with the embedding", "与词嵌入共享"],
    "flow.perlayer": [" (this component, per layer)", "(本组件每层)"],
    "flow.writes": ["writes into the stream", "次写入残差流"],
    "flow.src.preset": ["preset {name}", "预设 {name}"],
    "flow.src.config": ["model config {name}", "模型配置 {name}"],
    "flow.src.facts": ["{L} layers, d_model {d}, {h} query heads and {kv} key/value heads, norm {norm} ({place}), FFN {ff} wide ({ffn}), positions {pos}.",
                       "{L} 层,d_model {d},{h} 个查询头、{kv} 个键/值头,归一化 {norm}({place}),FFN 宽 {ff}({ffn}),位置编码 {pos}。"],
    "flow.missing": ["The anatomy probe is not available in this build.", "这个版本里还没有结构分析探针。"],

    "sim.h": ["Design it yourself: can we just stack them?", "先自己设计:直接堆叠行不行?"],
    "sim.naive.h": ["The naive plan.", "朴素方案。"],
    "sim.naive.p": ["x ← F(x): the output of one sublayer is the input of the next.",
                    "x ← F(x):上一个子层的输出就是下一个子层的输入。"],
    "sim.fail.h": ["Where it fails.", "在哪里失败。"],
    "sim.fail.p": ["Deeper plain networks train worse than shallow ones even when signals are normalized (He et al. 2016). In a Transformer two things break: the gradient either dies or blows up on its way to the bottom, and attention-only stacks average the tokens into one vector (Dong et al. 2021).",
                   "即使信号做了归一化,更深的直接堆叠网络也比浅的训练得更差(He 等 2016)。放到 Transformer 里有两处会坏:梯度传到底层时要么消失要么爆炸;只有注意力的堆叠会把所有 token 平均成同一个向量(Dong 等 2021)。"],
    "sim.fix.h": ["The fix.", "改进。"],
    "sim.fix.p": ["Add the input back: x ← x + F(x), so doing nothing is the default. Then tame the stream it creates: normalize what each sublayer reads, or shrink what it writes.",
                  "把输入加回来:x ← x + F(x),让「什么都不做」成为默认。再处理它带来的问题:把子层读到的输入归一化,或者把写回的量缩小。"],
    "sim.mode.gradient": ["Does the gradient reach the bottom?", "梯度能不能传到底层?"],
    "sim.mode.collapse": ["Do the tokens become the same?", "token 会不会变成一样?"],
    "sim.toggles": ["Green row:", "绿色一排:"],
    "sim.t.residual": ["residual x + F(x)", "残差 x + F(x)"],
    "sim.t.prenorm": ["pre-RMSNorm", "子层输入先 RMSNorm"],
    "sim.t.scale": ["write-back × 1/√N", "写回乘 1/√N"],
    "sim.note": ["Random weights at init gain g (weights ~ normal(0, g²/fan_in)), a fixed seed, float64: the same settings always give the same numbers; changing N or g draws a new set of weights. Nothing is trained.",
                 "随机权重,初始化尺度 g(权重服从正态分布 N(0, g²/fan_in)),固定种子,float64:同样的设置永远给出同样的数;改 N 或 g 会重新生成整套权重。没有任何训练。"],
    "sim.row.plain": ["Plain stack x ← F(x)", "直接堆叠 x ← F(x)"],
    "sim.row.improved": ["Improved stack", "改进后的堆叠"],
    "sim.bottom.gradient": ["Bottom/top gradient ratio over g (N fixed)", "底层/顶层梯度之比随 g 的变化(N 固定)"],
    "sim.bottom.collapse": ["Mean cosine between tokens, per layer", "token 两两余弦的平均值,逐层"],
    "sim.ax.layer": ["sublayer (1 = bottom)", "子层(1 = 最底层)"],
    "sim.ax.grad": ["gradient / top (log)", "梯度 / 顶层(对数)"],
    "sim.ax.write": ["writes into the stream", "写入次数"],
    "sim.ax.rms": ["stream RMS", "残差流 RMS"],
    "sim.ax.depth": ["attention sublayers passed", "经过的注意力子层数"],
    "sim.ax.dist": ["distance from all-equal (log)", "离「全部相同」的相对距离(对数)"],
    "sim.ax.g": ["init gain g", "初始化尺度 g"],
    "sim.ax.ratio": ["bottom / top (log)", "底层 / 顶层(对数)"],
    "sim.ax.cos": ["mean pairwise cosine", "两两余弦平均"],
    "sim.ro.ratio": ["bottom/top", "底/顶"],
    "sim.ro.rms": ["stream RMS at the top", "顶部残差流 RMS"],
    "sim.ro.dist": ["distance after N", "N 层后距离"],
    "sim.ro.cos": ["mean cosine", "余弦平均"],
    "sim.ro.orders": ["orders of magnitude between g = 0.5 and 2.0 (plain)", "g 从 0.5 到 2.0 跨过的数量级(直接堆叠)"],
    "sim.busy": ["computing…", "计算中…"],
    "sim.static": ["Static copy: N snaps to the exported grid", "静态副本:N 取导出网格上最近的值"],
    "sim.try.h": ["Try three things", "试三件事"],
    "sim.try.1": ["Watch only the red row and drag g from 0.5 to 2.0: the bars go from almost nothing at the bottom to far too much; the red curve below is the knife edge.",
                  "只看红色一排,把 g 从 0.5 拖到 2.0:底层的梯度柱从几乎为零变成大得离谱;下面那条红线就是「刀刃」。"],
    "sim.try.2": ["Leave only 'residual' on in the green row and drag g again: the green ratio never drops below 1, but it grows with depth, and so does the stream RMS.",
                  "绿色一排只开「残差」,再拖一遍 g:绿线始终不低于 1,梯度不再消失,但会随深度放大,残差流 RMS 也一起变大。"],
    "sim.try.3": ["Switch to 'do the tokens become the same': the red curve falls by many orders of magnitude; residual alone slows it; all three switches keep the tokens apart.",
                  "切到「token 会不会变成一样」:红线掉好几个数量级;只开残差会掉得慢很多;三个开关全开时,token 基本保持各自不同。"],

    "f.h": ["Step 1: the residual, x + F(x), and its arithmetic", "第 1 步:残差 x + F(x) 与它的算术"],
    "f.p": ["Unroll the sum and every sublayer's output is added to the stream; differentiate one step and the identity I appears beside ∂F/∂x. With scalar sublayers F(x) = a·x, N layers multiply out to (1 + a)^N: 2^N terms, one per path that skips or passes each layer. A plain stack keeps only the last term, a^N.",
            "把求和展开,每个子层的输出都被加进残差流;对一步求导,∂F/∂x 旁边多出一个单位矩阵 I。若每个子层是标量 F(x) = a·x,N 层相乘得 (1 + a)^N:共 2^N 项,每一项对应一条在每层选择「跳过」或「经过」的路径。直接堆叠只剩最后一项 a^N。"],
    "f.controls": ["edit N and a; x₀ = 1", "可改 N 与 a;x₀ = 1"],
    "f.example": ["Two layers, the four paths", "两层时的四条路径"],
    "f.skip": ["skip both", "两层都跳过"],
    "f.l1": ["layer 1 only", "只经过第 1 层"],
    "f.l2": ["layer 2 only", "只经过第 2 层"],
    "f.both": ["both layers", "两层都经过"],
    "f.k": ["sublayers passed (k)", "经过的子层数 k"],
    "f.count": ["paths C(N, k)", "路径数 C(N, k)"],
    "f.each": ["each a^k", "每条 a^k"],
    "f.sum": ["together", "合计"],
    "f.total": ["total (1 + a)^N", "总和 (1 + a)^N"],
    "f.plain": ["plain stack keeps a^N", "直接堆叠只剩 a^N"],
    "f.jac": ["Per layer the Jacobian is I + ∂F/∂x = 1 + a; over N layers (1 + a)^N, against a^N without the identity.",
              "每层的雅可比是 I + ∂F/∂x = 1 + a;N 层相乘是 (1 + a)^N,没有 I 时只有 a^N。"],
    "f.paths": ["paths", "条路径"],
    "f.vs": ["vs", "对"],
    "f.end": [".", "。"],

    "g.h": ["Step 2: a new failure, the stream keeps growing", "第 2 步:新的失败——残差流越加越大"],
    "g.p": ["x_L = x₀ + Σ F_l: every sublayer adds to the same stream. If each write is independent with variance 1, variances add and the standard deviation after k writes is √(1 + k). Below, measured with random unit-variance writes.",
            "x_L = x₀ + Σ F_l:每个子层都往同一条流里加东西。若每次写入独立、方差为 1,方差相加,k 次写入后的标准差是 √(1 + k)。下图是用随机单位方差写入实测的结果。"],
    "g.ax.k": ["writes k", "写入次数 k"],
    "g.ax.rms": ["stream RMS", "残差流 RMS"],
    "g.measured": ["measured", "实测"],
    "g.theory": ["√(1 + k)", "√(1 + k)"],
    "g.after": ["after", "写入"],
    "g.writes": ["writes", "次后"],

    "b.h": ["A block, drawn from its config", "一个块:按配置画出来"],
    "b.p": ["The stream runs straight through; each sublayer reads it, transforms, and writes back with one addition. Where the norm sits is the placement: before the sublayer (pre), on its output (output), both (sandwich), or after the add (post, the 2017 original).",
            "残差流从下到上直通;每个子层从流里读、变换、再用一次加法写回去。归一化放在哪里就是「位置」:子层之前(pre)、子层输出上(output)、两边都放(sandwich),或者加法之后(post,2017 年原版)。"],
    "b.preset": ["Preset", "预设"],
    "b.placement": ["Placement", "位置"],
    "b.stream": ["residual stream", "残差流"],
    "b.attn": ["attention", "注意力"],
    "b.ffn": ["FFN", "FFN"],
    "b.final": ["final norm", "最终归一化"],
    "b.d.colon": [": ", ":"],
    "b.d.sep": [", ", ","],
    "b.d.placement": ["placement", "归一化位置"],
    "b.d.norm": ["norm", "归一化"],
    "b.d.slots": ["slots", "插槽"],
    "b.d.residual": ["residual", "残差"],
    "b.d.writes": ["writes", "次写入"],
    "b.gate": ["gate", "门"],
    "b.head": ["LM head", "LM 输出头"],
    "b.alt": ["Block diagram: the residual stream runs up on the left; each sublayer reads it, transforms, and adds its output back.",
              "块的结构图:残差流在左边自下而上;每个子层从流里读、变换、再把输出加回去。"],
    "b.step.read": ["read: the {sub} sublayer takes a copy of the stream x", "读:{sub}子层从残差流取一份 x"],
    "b.step.norm": ["norm: rescale it to RMS 1 (the norm's weights then scale each channel)", "归一化:把它缩放到 RMS 为 1(再由归一化的权重逐通道缩放)"],
    "b.step.transform": ["transform: {sub} computes F(x)", "变换:{sub}计算 F(x)"],
    "b.step.scale": ["scale: the output is multiplied before the add", "缩放:输出在相加之前先乘一个系数"],
    "b.step.add": ["add: x ← x + F(x), the stream carries the sum up", "相加:x ← x + F(x),残差流带着和继续向上"],
    "b.step.write": ["write: x ← F(x), no residual: the output replaces the stream", "写:x ← F(x),没有残差,输出直接取代残差流"],
    "b.nores": ["no residual: the add is gone", "无残差:加法被去掉"],

    "n.h": ["LayerNorm or RMSNorm? A calculator", "LayerNorm 还是 RMSNorm?计算器"],
    "n.p": ["LayerNorm subtracts the mean, then divides by the standard deviation; RMSNorm only divides by the root mean square. Type a vector (up to 64 numbers), with gamma = 1 and beta = 0.",
            "LayerNorm 先减均值再除以标准差;RMSNorm 只除以均方根。输入一个向量(最多 64 个数),gamma = 1、beta = 0。"],
    "n.input": ["vector", "向量"],
    "n.mean": ["mean", "均值"],
    "n.var": ["variance", "方差"],
    "n.rms": ["RMS", "均方根 RMS"],
    "n.ln": ["LayerNorm", "LayerNorm"],
    "n.rn": ["RMSNorm", "RMSNorm"],
    "n.bad": ["Type numbers separated by commas or spaces.", "请输入用逗号或空格分隔的数字。"],
    "n.same": ["Scaling the vector does not change either output: only the direction and the spread matter.",
               "把向量整体放大,两个输出都不变:只和方向与分布有关。"],

    "e.h": ["The evolution of a block", "一个块的演进"],
    "e.p": ["Each generation was forced by a number of the previous one. The rows are computed from the presets and the model configs shipped with depthlab.",
            "每一代都被上一代的某个数字逼出来。表格由 depthlab 自带的预设和模型配置算出。"],
    "e.part": ["part", "零件"],
    "e.ffnshare": ["FFN share of parameters", "FFN 参数占比"],
    "e.writes": ["residual writes", "残差写入次数"],
    "e.initstd": ["output projection init std", "写回投影的初始化标准差"],
    "e.norm": ["norm", "归一化"],
    "e.gating": ["gating", "门控"],
    "e.gate": ["attention output gate", "注意力输出门"],
    "e.params": ["parameters", "参数量"],
    "e.missing": ["The evolution table needs the anatomy probe, which is not in this build.", "演进表需要结构分析探针,这个版本里还没有。"],

    "p.h": ["Project measurements: our own model without residuals", "项目实测:我们自己的模型去掉残差"],
    "p.p": ["The course model (4 layers, Pre-RMSNorm, SwiGLU) trained on real text; the control removes only the two x + of each block, everything else is identical.",
            "课程模型(4 层,Pre-RMSNorm,SwiGLU)在真实文本上训练;对照组只去掉每个块里的两处 x +,其余完全相同。"],
    "p.exported": ["data exported", "数据导出于"],
    "p.budget": ["budget", "预算"],
    "p.nodata": ["No data yet. This command produces them:", "还没有数据。用这条命令生成:"],
    "p.run": ["Run the quick experiment now", "现在运行快速实验"],
    "p.running": ["Running", "运行中"],
    "p.failed": ["The run failed", "运行失败"],
    "p.conclusions": ["What the data say", "读图"],
    "p.others": ["Other experiments, not run yet", "其他实验(尚未运行)"],
    "p.static": ["This static copy holds no project data.", "这个静态副本里没有项目数据。"],

    "m.h": ["Common misconceptions", "常见误解"],
    "m.1.h": ["“Residuals exist only to stop vanishing gradients.”", "「残差只是为了防梯度消失。」"],
    "m.1.p": ["Plain deep networks with normalization still train worse than shallower ones. The first change is the default: with F = 0 a block is the identity, so each layer only has to learn a correction. The shortcut for the gradient comes with it, and on its own it can even amplify the gradient (see the green row).",
              "带归一化的深层直接堆叠网络照样比浅的差。残差首先改变的是默认解:F = 0 时块就是恒等映射,每层只需学一个修正量。梯度直通路是附带的好处,而且只开残差时梯度还可能被放大(看绿色一排)。"],
    "m.2.h": ["“The residual concatenates the input.”", "「残差是把输入拼接在后面。」"],
    "m.2.p": ["It adds element by element, so every sublayer must write back at the width it read; wide inner layers are projected back to d before the add. Concatenation is a different design (DenseNet).",
              "残差是逐元素相加,所以每个子层写回的宽度必须和读入时一样;内部再宽,也要在相加前投影回 d。拼接是另一种设计(DenseNet)。"],
    "m.3.h": ["“With residuals, deeper is always better.”", "「有了残差,越深越好。」"],
    "m.3.p": ["The stream keeps growing, so a late layer's write is a smaller and smaller share of the sum; under Pre-Norm deep layers can end up contributing little.",
              "残差流越加越大,后面层的写入在总和里所占的比例越来越小;Pre-Norm 下深层的贡献可能被稀释。"],
    "m.4.h": ["“The gradient highway means every layer gets the same gradient.”", "「有了梯度高速公路,每层收到的梯度都一样。」"],
    "m.4.p": ["The identity path guarantees a floor, not equality: the other 2^N − 1 paths still add to it, which is why the residual-only row grows toward the bottom.",
              "恒等路径只保证一个下限,不保证相等:其余 2^N − 1 条路径仍然叠加上去,所以只开残差时梯度越往底层越大。"],
    next: ["Next: the stream grows with every write. Could each sublayer bring what it reads back to one scale first? That is the job of normalization, the next lesson.",
           "下一课:残差流每写一次就变大一点。能不能让每个子层在读之前先把尺度拉回同一范围?这正是归一化要做的事。"],

    "foot.live": ["Live page served by depthlab", "由 depthlab 实时提供的页面"],
    "foot.static": ["Static copy exported by depthlab", "depthlab 导出的静态副本"],
    "foot.at": ["on", "导出于"],
    "foot.grid": ["g step", "g 步长"],
    "err": ["Error", "错误"],
    "err.chart": ["This chart could not be drawn", "这张图没能画出来"],
    "chart.underflow": ["below the smallest float64, drawn as a marker on the axis floor", "小于 float64 能表示的最小值,画成坐标轴底部的标记"],

    "hover.grad": ["sublayer {x}: its gradient is {v} × the top layer's", "第 {x} 个子层:梯度是顶层的 {v} 倍"],
    "hover.rms": ["after {x} writes: stream RMS {v}", "写入 {x} 次后:残差流 RMS {v}"],
    "hover.dist": ["after {x} attention sublayers: {v} of the starting distance from all-equal", "经过 {x} 个注意力子层:离「全部相同」的距离是起点的 {v}"],
    "hover.ratio": ["g = {x}, {row}: bottom / top = {v}", "g = {x},{row}:底层 / 顶层 = {v}"],
    "hover.cos": ["after {x} sublayers, {row}: mean cosine {v}", "经过 {x} 个子层,{row}:余弦平均 {v}"],
    "hover.growth": ["after {x} writes: {row} {v}", "写入 {x} 次后:{row} {v}"],
    "hover.project": ["{xname} {x}, {row}: {v}", "{xname} {x},{row}:{v}"],

    "read.grad": ["At N = {n}, g = {g} the bottom sublayer of the plain stack receives {a} of the top's gradient; the improved stack's receives {b}.",
                  "N = {n}、g = {g} 时,直接堆叠的最底层子层只收到顶层梯度的 {a};改进后的堆叠收到 {b}。"],
    "read.dist": ["After N = {n} attention sublayers at g = {g} the plain stack's tokens keep {a} of their starting distance from all-equal; the improved stack keeps {b}.",
                  "g = {g} 时经过 N = {n} 个注意力子层,直接堆叠的 token 离「全部相同」的距离只剩起点的 {a};改进后的堆叠剩 {b}。"],
    "read.sweep": ["At N = {n}, moving g from 0.5 to 2.0 moves the plain bottom/top ratio across {a} orders of magnitude, the improved one across {b}.",
                   "N = {n} 时,g 从 0.5 变到 2.0,直接堆叠的底/顶之比跨过 {a} 个数量级,改进后的跨过 {b} 个。"],
    "read.cos": ["After {n} sublayers the mean cosine between tokens is {a} in the plain stack and {b} in the improved one (1 = all the same).",
                 "经过 {n} 个子层,token 两两余弦的平均值:直接堆叠 {a},改进后 {b}(1 = 全部相同)。"],
    "read.growth": ["After {k} unit-variance writes the stream RMS is {m}, against √(1 + {k}) = {e} for independent writes: the stream grows like the square root of the number of writes.",
                    "{k} 次单位方差写入之后,残差流 RMS 为 {m},独立写入的理论值 √(1 + {k}) = {e}:残差流随写入次数的平方根增长。"],
  };

  // Words inside the project data (series labels, table headers and cells: export.json
  // keeps them in English) and their Chinese. A label is translated part by part
  // ("12 layers, no residual" → "12 层,无残差"); what is not here stays as it is.
  const DATA_ZH = {
    "unigram baseline": "一元基线", layers: "层数", residual: "有残差", "no residual": "无残差",
    "residual (trained)": "有残差(训练后)", "final val loss": "最终验证损失",
    "gap (none - residual)": "差距(无残差 − 有残差)", plain: "有残差", none: "无残差",
    arm: "实验组", "first block": "第一块", "last block": "最后一块", "last / first": "最后 / 第一",
    init: "初始化", ratio: "比值", diverged: "发散", yes: "是", no: "否", norm: "归一化",
    "ms per step (median)": "每步毫秒数(中位数)", "attention on first token": "第一个 token 得到的注意力",
    "uniform baseline H_T/T": "均匀基线 H_T/T", "no gate": "无门控", "sigmoid output gate": "sigmoid 输出门",
    "at initialisation": "初始化时", "sqrt(1 + k): independent unit writes": "sqrt(1 + k):独立的单位方差写入",
    warmup: "带 warmup", "no warmup": "不带 warmup", quick: "快速", micro: "微型", full: "完整",
  };
  const DATA_RULES = [
    [/^(\d+) layers$/, "$1 层"], [/^init (.+)$/, "初始化 $1"], [/^final RMS, (\d+) layers$/, "最终 RMS,$1 层"],
    [/^after training \(step (\d+)\)$/, "训练后(第 $1 步)"],
  ];
  function dataZh(s) {
    if (s in DATA_ZH) return DATA_ZH[s];
    for (const [re, to] of DATA_RULES) if (re.test(s)) return s.replace(re, to);
    return null;
  }
  const COLUMN_ZH = { residual: "残差" }; // as a table header, not a cell's value
  DL.trData = (s, column) => {
    if (lang !== "zh" || typeof s !== "string") return s;
    if (column && s in COLUMN_ZH) return COLUMN_ZH[s];
    const whole = dataZh(s);
    if (whole != null) return whole;
    const parts = s.split(", ");
    return parts.length > 1 ? parts.map((p) => dataZh(p) || p).join(",") : s;
  };

  let lang = "en";
  // DL.t("read.grad", {n: 40, ...}) fills {n} and the other named holes.
  DL.t = (key, vars) => {
    const s = S[key];
    if (!s) return key;
    const out = s[lang === "zh" ? 1 : 0];
    return vars ? out.replace(/\{(\w+)\}/g, (m, k) => (k in vars ? String(vars[k]) : m)) : out;
  };
  // {en, zh} objects from export.json and the API.
  DL.tr = (obj) => (obj == null ? "" : typeof obj === "string" ? obj : obj[lang] || obj.en || "");
  DL.lang = () => lang;
  DL.defaultLang = () => ((navigator.language || "en").toLowerCase().startsWith("zh") ? "zh" : "en");
  DL.setLang = (l) => {
    lang = l === "zh" ? "zh" : "en";
    document.documentElement.lang = lang === "zh" ? "zh-CN" : "en";
    document.querySelectorAll("[data-i18n]").forEach((el) => {
      el.textContent = DL.t(el.dataset.i18n);
    });
  };
  DL.hasKey = (k) => k in S;
})();
