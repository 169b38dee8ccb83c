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

/// A workflow that reads but cannot become a pipeline here.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CompileError {
    /// The workflow itself is malformed.
    #[error(transparent)]
    Workflow(#[from] WorkflowError),
    /// Nodes no enabled translator handles: (node id, class type), every one.
    #[error("no translator for {}", .0.iter().map(|(id, ty)| format!("node {id} ({ty})")).collect::<Vec<_>>().join(", "))]
    Untranslated(Vec<(String, String)>),
    /// A translator refused a node.
    #[error("node {node} ({class_type}): translator `{translator}`: {message}")]
    Translator {
        /// The node.
        node: String,
        /// Its type.
        class_type: String,
        /// The translator's name in the deploy.
        translator: String,
        /// Its message.
        message: String,
    },
    /// The translated graph is not valid, or asks for what this runtime does not run.
    #[error("node {node}: {message}")]
    Node {
        /// The ComfyUI node at fault.
        node: String,
        /// What is wrong.
        message: String,
    },
    /// A loader's input names a file that cannot be used (missing, not a picture, …): found
    /// when the run's request is made, before any model work.
    #[error("node {node}: {input}: {message}")]
    Input {
        /// The loader node (`LoadImage`, `LoadVideo`).
        node: String,
        /// Its input (`image`, `file`).
        input: String,
        /// What is wrong.
        message: String,
    },
    /// Something about the graph as a whole (no output node, …).
    #[error("{0}")]
    Graph(String),
}

impl CompileError {
    /// An error at ComfyUI node `node`.
    pub fn node(node: impl Into<String>, message: impl Into<String>) -> Self {
        CompileError::Node { node: node.into(), message: message.into() }
    }

    /// An error in input `input` of ComfyUI node `node`.
    pub fn input(node: impl Into<String>, input: impl Into<String>, message: impl Into<String>) -> Self {
        CompileError::Input { node: node.into(), input: input.into(), message: message.into() }
    }
}
