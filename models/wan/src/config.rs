//! Reading diffusers/transformers `config.json` files strictly: every config struct denies
//! unknown fields, so a key we do not implement is an error naming the key (silently ignoring
//! one could run a different model than the checkpoint describes); each struct's `validate`
//! refuses known keys set to values we do not implement, again naming the key.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Keys that record provenance, not architecture; accepted and dropped everywhere.
const METADATA: &[&str] = &[
    "_class_name",
    "_diffusers_version",
    "_name_or_path",
    "transformers_version",
    "architectures",
    "dtype",
    "torch_dtype",
    "model_type",
    "output_past",
    "use_cache",
];

/// Parses the JSON object at `path` into `T` (which should `deny_unknown_fields`).
pub fn read_config<T: DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value: Value = serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", path.display()))?;
    let Value::Object(mut map) = value else {
        bail!("{}: expected a JSON object", path.display());
    };
    map.retain(|k, _| !METADATA.contains(&k.as_str()));
    serde_json::from_value(Value::Object(map)).map_err(|e| {
        anyhow::anyhow!("{}: {}", path.display(), e.to_string().replace("unknown field", "unsupported config key"))
    })
}

/// Error for a known key holding a value we do not implement.
pub fn unsupported(path: &Path, key: &str, value: impl std::fmt::Display, supported: &str) -> anyhow::Error {
    anyhow::anyhow!("{}: config key `{key}` = {value} is not supported ({supported})", path.display())
}
