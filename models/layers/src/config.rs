//! Reading diffusers/transformers `config.json` files: every config struct denies unknown
//! fields, so a key we do not implement is an error naming the key (silently ignoring one could
//! run a different model than the checkpoint describes); each struct's `load` refuses known keys
//! set to values we do not implement, again naming the key. Keys that cannot change the
//! computation — provenance, and fields other library versions write that the reference's
//! inference ignores — are accepted and dropped, with a debug log naming them.

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
    "_use_default_values",
    "_commit_hash",
    "_attn_implementation",
    "_attn_implementation_autoset",
];

/// Fields every transformers `PretrainedConfig` may serialise that only steer training, output
/// bookkeeping or generation, never an encoder forward.
pub const TRANSFORMERS_BOOKKEEPING: &[&str] = &[
    "return_dict",
    "output_hidden_states",
    "output_attentions",
    "torchscript",
    "pruned_heads",
    "chunk_size_feed_forward",
    "tie_encoder_decoder",
    "bos_token_id",
    "sep_token_id",
    "id2label",
    "label2id",
    "problem_type",
    "finetuning_task",
    "prefix",
    "task_specific_params",
    "add_cross_attention",
    "cross_attention_hidden_size",
    "gradient_checkpointing",
    "is_composition",
    "tf_legacy_loss",
    "use_bfloat16",
];

/// Parses the JSON object at `path` into `T` (which should `deny_unknown_fields`).
pub fn read_config<T: DeserializeOwned>(path: &Path) -> Result<T> {
    read_config_with(path, &[])
}

/// [`read_config`], also accepting and dropping the keys in `inert` (fields the reference
/// implementation's inference never reads), each named in a debug log.
pub fn read_config_with<T: DeserializeOwned>(path: &Path, inert: &[&[&str]]) -> Result<T> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value: Value = serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", path.display()))?;
    let Value::Object(mut map) = value else {
        bail!("{}: expected a JSON object", path.display());
    };
    map.retain(|k, v| {
        if METADATA.contains(&k.as_str()) {
            return false;
        }
        if inert.iter().any(|list| list.contains(&k.as_str())) {
            tracing::debug!(file = %path.display(), key = %k, value = %v, "config key accepted: it does not change inference");
            return false;
        }
        true
    });
    serde_json::from_value(Value::Object(map)).map_err(|e| {
        anyhow::anyhow!("{}: {}", path.display(), e.to_string().replace("unknown field", "unsupported config key"))
    })
}

/// Error for a known key holding a value we do not implement.
pub fn unsupported(path: &Path, key: &str, value: impl std::fmt::Display, supported: &str) -> anyhow::Error {
    anyhow::anyhow!("{}: config key `{key}` = {value} is not supported ({supported})", path.display())
}
