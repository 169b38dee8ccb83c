//! `fastvideo plugin …`: inspect plugins without running them (hash, audit) and build them
//! (componentize an SDK-built core module).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use fastvideo_plugin_host::{blake3_hex, inspect, inspect_any, DeployConfig, Inspection, PROVIDED};

#[derive(Subcommand)]
pub enum PluginCommand {
    /// Print the blake3 hash a deploy config pins the plugin by.
    Hash { wasm: PathBuf },
    /// Report what a plugin is and may do, from the file alone.
    Audit(AuditArgs),
    /// Wrap a core module built for wasm32-unknown-unknown with the SDK into a component.
    Componentize {
        core: PathBuf,
        #[arg(long, short)]
        out: PathBuf,
    },
    /// Add the manifest (a JSON file) to a component built by another toolchain, e.g. a Python
    /// plugin from componentize-py.
    EmbedManifest {
        component: PathBuf,
        manifest: PathBuf,
        #[arg(long, short)]
        out: PathBuf,
    },
}

#[derive(Args)]
pub struct AuditArgs {
    wasm: PathBuf,
    /// Check the plugin against this deploy's grants for it (matched by blake3, else by name).
    #[arg(long)]
    deploy: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

fn read(p: &Path) -> Result<Vec<u8>> {
    std::fs::read(p).with_context(|| format!("reading {}", p.display()))
}

pub fn run(cmd: PluginCommand) -> Result<()> {
    match cmd {
        PluginCommand::Hash { wasm } => {
            println!("{}  {}", blake3_hex(&read(&wasm)?), wasm.display());
            Ok(())
        }
        PluginCommand::EmbedManifest { component, manifest, out } => {
            let json = std::fs::read_to_string(&manifest).with_context(|| format!("reading {}", manifest.display()))?;
            let with = fastvideo_plugin_host::embed_manifest(&read(&component)?, &json)
                .with_context(|| format!("{} with {}", component.display(), manifest.display()))?;
            std::fs::write(&out, &with).with_context(|| format!("writing {}", out.display()))?;
            eprintln!("wrote {} ({} bytes, blake3 {})", out.display(), with.len(), blake3_hex(&with));
            Ok(())
        }
        PluginCommand::Componentize { core, out } => {
            let component = fastvideo_plugin_host::componentize(&read(&core)?)?;
            let audit = inspect(&component).with_context(|| format!("componentized {}", core.display()))?;
            std::fs::write(&out, &component).with_context(|| format!("writing {}", out.display()))?;
            eprintln!("wrote {} ({} bytes, blake3 {})", out.display(), component.len(), audit.blake3);
            Ok(())
        }
        PluginCommand::Audit(a) => audit(a),
    }
}

/// Everything the bytes say, then the deploy check, then — for a component that cannot load —
/// every reason, with a non-zero exit. A component without our manifest still shows its imports
/// (`wasi:sockets/…`) and exports, so an untrusted file is never a black box.
fn audit(a: AuditArgs) -> Result<()> {
    let bytes = read(&a.wasm)?;
    let report = inspect_any(&bytes).with_context(|| a.wasm.display().to_string())?;
    let name = report.manifest.as_ref().map(|m| m.name.as_str());
    let grants = match &a.deploy {
        Some(d) => {
            let text = std::fs::read_to_string(d).with_context(|| format!("reading {}", d.display()))?;
            let cfg: DeployConfig =
                toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {}", d.display(), e.message()))?;
            let entry = cfg
                .plugins
                .iter()
                .find(|p| p.blake3.trim().eq_ignore_ascii_case(&report.blake3))
                .or_else(|| cfg.plugins.iter().find(|p| Some(p.name.as_str()) == name));
            Some(
                entry.map(|e| (e.name.clone(), e.grants.clone(), e.blake3.trim().eq_ignore_ascii_case(&report.blake3))),
            )
        }
        None => None,
    };
    let missing = grants.as_ref().and_then(|g| g.as_ref()).map(|(_, g, _)| report.missing_grants(g));
    let unprovided: Vec<&String> = report.capabilities.iter().filter(|c| !PROVIDED.contains(&c.as_str())).collect();
    let mut cannot_load = report.problems.clone();
    if !unprovided.is_empty() {
        let list: Vec<&str> = unprovided.iter().map(|s| s.as_str()).collect();
        cannot_load.insert(0, format!("imports interfaces this host does not provide: {}", list.join(", ")));
    }
    if a.json {
        let v = serde_json::json!({
            "file": a.wasm.display().to_string(),
            "audit": report,
            "not_provided_by_host": unprovided,
            "loadable": cannot_load.is_empty(),
            "cannot_load": cannot_load,
            "deploy": grants.as_ref().map(|g| match g {
                Some((name, grants, hash_ok)) => serde_json::json!({
                    "entry": name, "grants": grants, "hash_matches": hash_ok, "missing_grants": missing,
                    "grants_suffice": missing.as_ref().is_some_and(|m| m.is_empty()) && *hash_ok,
                }),
                None => serde_json::json!({"entry": null, "grants_suffice": false}),
            }),
        });
        let _ = writeln!(std::io::stdout().lock(), "{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", audit_text(&a, &report, &grants, &missing, &cannot_load));
    }
    if !cannot_load.is_empty() {
        bail!("{}: cannot load as a plugin: {}", a.wasm.display(), cannot_load.join("; "));
    }
    Ok(())
}

type DeployEntry = Option<Option<(String, Vec<String>, bool)>>;

fn audit_text(
    a: &AuditArgs,
    report: &Inspection,
    grants: &DeployEntry,
    missing: &Option<Vec<String>>,
    cannot_load: &[String],
) -> String {
    let list = |v: &[String]| if v.is_empty() { "none".to_string() } else { v.join(", ") };
    let mut out = String::new();
    out += &format!("file:        {}\n", a.wasm.display());
    out += &format!("blake3:      {}\n", report.blake3);
    out += &format!("size:        {} bytes\n", report.size);
    match &report.manifest {
        Some(m) => {
            out += &format!("name:        {} {}\n", m.name, m.version);
            out += &format!("kind:        {}\n", m.kind.interface());
            out += &format!("wit:         fastvideo:plugin@{}\n", m.wit);
            out += &format!("hooks:       {}\n", m.hooks.join(", "));
            out += &format!(
                "flags:       distribution_altering={} needs_eager={}\n",
                m.distribution_altering, m.needs_eager
            );
        }
        None => out += "manifest:    none (not a fastvideo plugin, or a damaged one)\n",
    }
    out += &format!("imports:     {}\n", list(&report.imports));
    out += &format!("exports:     {}\n", list(&report.exports));
    out += &format!("capabilities: {}\n", list(&report.capabilities));
    if let Some(m) = &report.manifest {
        out += &format!("params:      {}\n", m.params_schema);
    }
    match grants {
        Some(Some((name, g, hash_ok))) => {
            let miss = missing.clone().unwrap_or_default();
            out += &format!("deploy:      entry `{name}`, grants [{}]\n", g.join(", "));
            out += &format!(
                "             hash {}\n",
                if *hash_ok { "matches" } else { "DOES NOT match the pinned blake3" }
            );
            out += &format!(
                "             grants {}\n",
                if miss.is_empty() { "suffice".to_string() } else { format!("missing: {}", miss.join(", ")) }
            );
        }
        Some(None) => out += "deploy:      no entry for this plugin (neither its hash nor its name)\n",
        None => {}
    }
    for r in cannot_load {
        out += &format!("cannot load: {r}\n");
    }
    out
}
