use thiserror::Error;

/// A request that cannot run as given. Always names the offending field and the rule it broke, so
/// the CLI prints one line and the server answers a 400 whose body points at the field.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{field}: {rule}")]
pub struct RequestError {
    /// Dotted path of the field, e.g. `diffusion.num_frames`.
    pub field: String,
    /// The rule, in words, with the value that broke it.
    pub rule: String,
}

impl RequestError {
    /// An error for `field` (a dotted path such as `diffusion.width`) that broke `rule`.
    pub fn new(field: impl Into<String>, rule: impl Into<String>) -> Self {
        Self { field: field.into(), rule: rule.into() }
    }
}
