//! How much of a folder of workflows (the public template corpus) we can read and translate:
//! per workflow whether it parses and the first node type nothing handles; per node type how
//! many workflows need it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::{compile, format_of, parse, Schemas, Translators, WorkflowConfig};

/// One workflow file's result.
#[derive(Debug, Clone, Serialize)]
pub struct WorkflowCoverage {
    /// File name.
    pub file: String,
    /// Why it does not parse; `None` when it does.
    pub error: Option<String>,
    /// Executable nodes after flattening (subgraphs expanded, bypassed and muted nodes gone).
    pub nodes: usize,
    /// Node types nothing handles, in the order they first appear.
    pub missing: Vec<String>,
    /// When compiled (see [`Coverage::compile_with`]): whether it compiles.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compiles: Option<bool>,
    /// Why it does not compile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compile_error: Option<String>,
    /// When compiled with a deploy: every run's model files map to a model folder here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs_here: Option<bool>,
}

impl WorkflowCoverage {
    fn failed(file: String, error: String) -> Self {
        Self {
            file,
            error: Some(error),
            nodes: 0,
            missing: vec![],
            compiles: None,
            compile_error: None,
            runs_here: None,
        }
    }

    /// Parses, and every node type is handled.
    pub fn covered(&self) -> bool {
        self.error.is_none() && self.missing.is_empty()
    }
}

/// A node type across the corpus.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TypeCoverage {
    /// Workflows that use it.
    pub workflows: usize,
    /// Something handles it.
    pub handled: bool,
}

/// A folder's coverage.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Coverage {
    /// Per workflow, by file name.
    pub workflows: Vec<WorkflowCoverage>,
    /// Per node type.
    pub node_types: BTreeMap<String, TypeCoverage>,
    /// JSON files that are not workflows (template indexes and the like).
    pub skipped: Vec<String>,
}

impl Coverage {
    /// Reads every `*.json` in `dir` (not recursive), in name order; `handled` says whether a
    /// node type has a translator.
    pub fn of_dir(dir: &Path, schemas: &Schemas, handled: &dyn Fn(&str) -> bool) -> std::io::Result<Self> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        let mut c = Coverage::default();
        for path in files {
            let file = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let text = std::fs::read_to_string(&path)?;
            let v: Value = match serde_json::from_str(&text) {
                Ok(v) => v,
                Err(e) => {
                    c.workflows.push(WorkflowCoverage::failed(file, format!("not JSON: {e}")));
                    continue;
                }
            };
            if format_of(&v).is_err() {
                c.skipped.push(file);
                continue;
            }
            c.add(file, &v, schemas, handled);
        }
        Ok(c)
    }

    fn add(&mut self, file: String, v: &Value, schemas: &Schemas, handled: &dyn Fn(&str) -> bool) {
        let w = match parse(v, schemas) {
            Ok(w) => w,
            Err(e) => {
                self.workflows.push(WorkflowCoverage::failed(file, e.to_string()));
                return;
            }
        };
        let mut types: Vec<&str> = Vec::new();
        for n in &w.nodes {
            if !types.contains(&n.class_type.as_str()) {
                types.push(&n.class_type);
            }
        }
        for t in &types {
            let e = self.node_types.entry(t.to_string()).or_default();
            e.workflows += 1;
            e.handled = handled(t);
        }
        let missing = types.iter().filter(|t| !handled(t)).map(|t| t.to_string()).collect();
        self.workflows.push(WorkflowCoverage {
            file,
            error: None,
            nodes: w.nodes.len(),
            missing,
            compiles: None,
            compile_error: None,
            runs_here: None,
        });
    }

    /// Compiles every workflow in `dir` whose node types are all handled, recording whether it
    /// compiles and whether `models` maps every run's model files (so it runs here).
    pub fn compile_with(
        &mut self,
        dir: &Path,
        translators: &Translators,
        models: &WorkflowConfig,
    ) -> std::io::Result<()> {
        for w in self.workflows.iter_mut().filter(|w| w.covered()) {
            let v: Value = serde_json::from_str(&std::fs::read_to_string(dir.join(&w.file))?)?;
            match compile(&v, translators) {
                Ok(c) => {
                    w.compiles = Some(true);
                    w.runs_here = Some(c.runs.iter().all(|r| models.folder_for(r).is_ok()));
                }
                Err(e) => (w.compiles, w.compile_error) = (Some(false), Some(e.to_string())),
            }
        }
        Ok(())
    }

    /// Workflows that compile (after [`compile_with`](Self::compile_with)).
    pub fn compiled(&self) -> usize {
        self.workflows.iter().filter(|w| w.compiles == Some(true)).count()
    }

    /// Workflows that compile and whose model files all map to a folder here.
    pub fn runs_here(&self) -> usize {
        self.workflows.iter().filter(|w| w.runs_here == Some(true)).count()
    }

    /// Workflows that parse.
    pub fn parsed(&self) -> usize {
        self.workflows.iter().filter(|w| w.error.is_none()).count()
    }

    /// Workflows every node type of which is handled.
    pub fn covered(&self) -> usize {
        self.workflows.iter().filter(|w| w.covered()).count()
    }

    /// The report as Markdown: headline numbers, the node types most workflows miss, and one
    /// row per workflow.
    pub fn to_markdown(&self, top: usize) -> String {
        let mut s = format!(
            "{} workflows: {} parse, {} have every node type handled, {} compile, {} run here ({} other JSON files skipped).\n\n",
            self.workflows.len(),
            self.parsed(),
            self.covered(),
            self.compiled(),
            self.runs_here(),
            self.skipped.len()
        );
        let mut missing: Vec<(&String, &TypeCoverage)> = self.node_types.iter().filter(|(_, t)| !t.handled).collect();
        missing.sort_by(|a, b| b.1.workflows.cmp(&a.1.workflows).then(a.0.cmp(b.0)));
        s += &format!("Node types not handled, by how many workflows need them (top {top}):\n\n| node type | workflows |\n|---|---|\n");
        for (t, c) in missing.iter().take(top) {
            s += &format!("| `{t}` | {} |\n", c.workflows);
        }
        s += "\n| workflow | parses | nodes | first missing node type | compiles | runs here |\n|---|---|---|---|---|---|\n";
        for w in &self.workflows {
            let parses = match &w.error {
                None => "yes".to_string(),
                Some(e) => format!("no: {}", e.replace('|', "\\|")),
            };
            let first = w.missing.first().map(|t| format!("`{t}`")).unwrap_or_else(|| "—".into());
            let compiles = match (w.compiles, &w.compile_error) {
                (None, _) => "—".to_string(),
                (Some(true), _) => "yes".into(),
                (Some(false), e) => format!("no: {}", e.as_deref().unwrap_or_default().replace('|', "\\|")),
            };
            let here = match w.runs_here {
                None => "—",
                Some(true) => "yes",
                Some(false) => "no (model files not mapped)",
            };
            s += &format!("| {} | {parses} | {} | {first} | {compiles} | {here} |\n", w.file, w.nodes);
        }
        s
    }
}
