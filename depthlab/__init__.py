"""depthlab: a lab for how information gets through a deep Transformer.

config -> model -> hooks -> probes / trainer -> metric log -> plots / page.
"""

from depthlab.config import Config, DataConfig, ModelConfig, TrainConfig

__version__ = "0.1.0"

__all__ = ["Config", "DataConfig", "ModelConfig", "TrainConfig", "__version__"]
