//! What an operator reads before enabling an adapter: format, ranks, alphas, which modules it
//! touches and how big it is, from the file alone.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::LoraFile;

/// A LoRA file at a glance (`fastvideo lora inspect`).
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// How the file names its modules ([`Format::as_str`](crate::Format::as_str)).
    pub format: &'static str,
    /// Transformer modules it changes.
    pub modules: usize,
    /// Text-encoder modules it changes.
    pub text_modules: usize,
    /// Distinct ranks of its low-rank pairs.
    pub ranks: BTreeSet<usize>,
    /// Distinct alphas (none when the file has no alpha keys).
    pub alphas: Vec<f64>,
    /// Distinct scales the pairs get (`alpha / rank`, metadata, or 1).
    pub scales: Vec<f64>,
    /// Modules by kind (the name without its block index, e.g. `blocks.*.attn1.to_q`): count.
    pub targets: BTreeMap<String, usize>,
    /// Modules with a full-weight difference (`diff`), which add a whole matrix, not a rank.
    pub weight_diffs: usize,
    /// Modules with a bias difference (`diff_b`).
    pub bias_diffs: usize,
    /// Values in its tensors.
    pub parameters: u64,
    /// Bytes of its tensors, what loading it costs in memory.
    pub tensor_bytes: u64,
    /// The file's size on disk, header included.
    pub file_bytes: u64,
    /// Norm or modulation differences left out.
    pub ignored: usize,
}

fn push_distinct(v: &mut Vec<f64>, x: f64) {
    if !v.contains(&x) {
        v.push(x);
    }
}

/// `encoder.block.3.layer.0.SelfAttention.q` → `encoder.block.*.layer.0.SelfAttention.q`.
fn text_kind(module: &str) -> String {
    match module.strip_prefix("encoder.block.").and_then(|r| r.split_once('.')) {
        Some((i, rest)) if i.parse::<u32>().is_ok() => format!("encoder.block.*.{rest}"),
        _ => module.to_string(),
    }
}

/// `blocks.12.attn1.to_q` → `blocks.*.attn1.to_q`.
fn kind_of(module: &str) -> String {
    match module.strip_prefix("blocks.").and_then(|r| r.split_once('.')) {
        Some((i, rest)) if i.parse::<u32>().is_ok() => format!("blocks.*.{rest}"),
        _ => module.to_string(),
    }
}

impl Summary {
    pub(crate) fn of(f: &LoraFile) -> Self {
        let mut s = Summary {
            format: f.format.as_str(),
            modules: f.modules.len(),
            text_modules: f.text.len(),
            ranks: BTreeSet::new(),
            alphas: Vec::new(),
            scales: Vec::new(),
            targets: BTreeMap::new(),
            weight_diffs: 0,
            bias_diffs: 0,
            parameters: 0,
            tensor_bytes: 0,
            file_bytes: f.file_bytes,
            ignored: f.ignored.len(),
        };
        let text = f.text.iter().map(|(n, p)| (format!("text_encoder.{}", text_kind(n)), p));
        for (kind, p) in f.modules.iter().map(|(n, p)| (kind_of(n), p)).chain(text) {
            *s.targets.entry(kind).or_default() += 1;
            if let Some(r) = p.rank() {
                s.ranks.insert(r);
                push_distinct(&mut s.scales, p.scale());
            }
            if let Some(a) = p.alpha {
                push_distinct(&mut s.alphas, a);
            }
            s.weight_diffs += p.diff.is_some() as usize;
            s.bias_diffs += p.diff_b.is_some() as usize;
            for t in [&p.down, &p.up, &p.diff, &p.diff_b].into_iter().flatten() {
                let n = t.shape.iter().product::<usize>() as u64;
                s.parameters += n;
                s.tensor_bytes += t.data.len() as u64;
            }
        }
        s.alphas.sort_by(f64::total_cmp);
        s.scales.sort_by(f64::total_cmp);
        s
    }

    /// The same as JSON (`fastvideo lora inspect --json`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "format": self.format,
            "modules": self.modules,
            "text_modules": self.text_modules,
            "ranks": self.ranks,
            "alphas": self.alphas,
            "scales": self.scales,
            "targets": self.targets,
            "weight_diffs": self.weight_diffs,
            "bias_diffs": self.bias_diffs,
            "parameters": self.parameters,
            "tensor_bytes": self.tensor_bytes,
            "file_bytes": self.file_bytes,
            "ignored_keys": self.ignored,
        })
    }
}

fn list<T: fmt::Display>(v: impl IntoIterator<Item = T>) -> String {
    let s: Vec<String> = v.into_iter().map(|x| x.to_string()).collect();
    if s.is_empty() {
        "none".into()
    } else {
        s.join(", ")
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "format:       {}", self.format)?;
        writeln!(f, "modules:      {} (text encoder: {})", self.modules, self.text_modules)?;
        writeln!(f, "rank:         {}", list(&self.ranks))?;
        writeln!(f, "alpha:        {}", list(&self.alphas))?;
        writeln!(f, "scale:        {}", list(&self.scales))?;
        writeln!(f, "diffs:        {} weight, {} bias", self.weight_diffs, self.bias_diffs)?;
        writeln!(f, "parameters:   {}", self.parameters)?;
        writeln!(f, "size:         {} bytes of tensors, {} bytes on disk", self.tensor_bytes, self.file_bytes)?;
        if self.ignored > 0 {
            writeln!(f, "ignored:      {} norm/modulation differences (diffusers leaves them out too)", self.ignored)?;
        }
        writeln!(f, "targets:")?;
        for (k, n) in &self.targets {
            writeln!(f, "  {k:<52} {n}")?;
        }
        Ok(())
    }
}
