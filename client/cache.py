"""Where stepahead keeps converted models and downloaded data (see stepahead_common/cache_dir.py)."""

from __future__ import annotations

from stepahead_common.cache_dir import CACHE_ENV_VAR, stepahead_cache_dir

__all__ = ["CACHE_ENV_VAR", "stepahead_cache_dir"]
