/// A workflow that cannot be read: the node (its full id, `outer:inner` inside subgraphs) and
/// the field at fault, and what is wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}{}{message}", node.as_ref().map(|n| format!("node {n}: ")).unwrap_or_default(), if field.is_empty() { String::new() } else { format!("{field}: ") })]
pub struct WorkflowError {
    /// The node at fault, if the problem is in one.
    pub node: Option<String>,
    /// The field, as it is spelt in the file (`inputs.seed`, `links[3]`, `class_type`).
    pub field: String,
    /// What is wrong, in words.
    pub message: String,
}

impl WorkflowError {
    /// An error in node `node`'s `field`.
    pub fn at(node: impl ToString, field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { node: Some(node.to_string()), field: field.into(), message: message.into() }
    }

    /// An error in the workflow as a whole (its top-level `field`).
    pub fn top(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { node: None, field: field.into(), message: message.into() }
    }
}
