//! The config's file form, its defaults and the flags over it; the engine built from it.

use std::path::{Path, PathBuf};

use clap::Parser;

use crate::args::{EngineArgs, ServerArgs};
use crate::{build_engine, ServeConfig};

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/serve.toml")
}

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    engine: EngineArgs,
    #[command(flatten)]
    server: ServerArgs,
}

fn from_flags(flags: &[&str]) -> ServeConfig {
    let f = Flags::try_parse_from(std::iter::once("serve").chain(flags.iter().copied())).unwrap();
    let mut cfg = f.engine.config().unwrap();
    f.server.apply(&mut cfg);
    cfg
}

fn write(dir: &Path, text: &str) -> PathBuf {
    let p = dir.join("serve.toml");
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn the_example_file_spells_out_the_defaults() {
    assert_eq!(ServeConfig::load(&example()).unwrap(), ServeConfig::default());
}

#[test]
fn flags_and_the_file_give_the_same_config_and_flags_win() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "deploy = \"d.toml\"\n[model]\ndtype = \"fp16\"\nparallel = \"cfg+sp\"\ngpus = 4\nmax_device_memory = \"24G\"\n\
         [scheduler]\npolicy = \"fifo\"\nmax_batch = 2\n[storage]\ndisk_budget = \"512M\"\n\
         [http]\ndrain = \"cancel\"\n",
    );
    let from_file = ServeConfig::load(&file).unwrap();
    // Relative paths are the file's folder's.
    assert_eq!(from_file.deploy.as_deref(), Some(dir.path().join("d.toml").as_path()));
    let deploy = dir.path().join("d.toml");
    let flags = from_flags(&[
        "--deploy",
        deploy.to_str().unwrap(),
        "--dtype",
        "fp16",
        "--parallel",
        "cfg+sp",
        "--gpus",
        "4",
        "--max-device-memory",
        "24G",
        "--policy",
        "fifo",
        "--max-batch",
        "2",
        "--disk-budget",
        "512M",
        "--drain",
        "cancel",
    ]);
    assert_eq!(flags, from_file);
    // A flag beside --config overrides that one key and keeps the rest of the file.
    let over = from_flags(&["--config", file.to_str().unwrap(), "--max-batch", "3", "--port", "9"]);
    assert_eq!((over.scheduler.max_batch, over.http.port), (Some(3), 9));
    assert_eq!(over.model, from_file.model);
    assert_eq!(over.storage.disk_budget, 512 << 20);
    assert_eq!(over.model.max_device_memory, Some(24 << 30));
}

#[test]
fn bad_files_name_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let err = |text: &str| format!("{:#}", ServeConfig::load(&write(dir.path(), text)).unwrap_err());
    let e = err("[scheduler]\nmax_activ = 3\n");
    assert!(e.contains("max_activ") && e.contains("serve.toml"), "{e}");
    let e = err("[model]\ndtype = \"fp8\"\n");
    assert!(e.contains("dtype") && e.contains("fp8"), "{e}");
    let e = err("[model]\nparallel = \"tp\"\n");
    assert!(e.contains("unknown parallel mode `tp`"), "{e}");
    let e = err("[model]\nmax_device_memory = \"24Q\"\n");
    assert!(e.contains("max_device_memory") && e.contains("unit"), "{e}");
    let e = err("[storage]\ndisk_budget = \"12Q\"\n");
    assert!(e.contains("disk_budget") && e.contains("unit"), "{e}");
    let e = format!("{:#}", ServeConfig::load(&dir.path().join("missing.toml")).unwrap_err());
    assert!(e.contains("--config") && e.contains("missing.toml"), "{e}");
}

#[test]
fn validation_names_the_field_and_its_flag() {
    let check = |f: &dyn Fn(&mut ServeConfig)| {
        let mut c = ServeConfig::default();
        f(&mut c);
        c.validate().unwrap_err().to_string()
    };
    assert!(check(&|c| c.scheduler.max_active = 0).contains("--max-active"));
    assert!(check(&|c| c.scheduler.max_stretch = 0.5).contains("scheduler.max_stretch (--max-stretch)"));
    assert!(check(&|c| c.scheduler.overdue_share = 0.0).contains("--overdue-share"));
    assert!(check(&|c| c.world.job_floor = 2.0).contains("world.job_floor"));
    assert!(check(&|c| c.webrtc.ice = vec!["http://x".into()]).contains("webrtc.ice"));
    assert!(ServeConfig::default().validate().is_ok());
}

#[test]
fn the_engine_describes_what_the_config_built() {
    let mut cfg = ServeConfig::default();
    cfg.model.device = "cpu".into();
    cfg.model.name = Some("tiny".into());
    cfg.scheduler.max_active = 3;
    cfg.scheduler.memory_mib = Some(1234);
    cfg.scheduler.max_stretch = 0.0;
    let built = build_engine(&cfg).unwrap();
    let d = &built.description;
    assert_eq!((d.model.as_str(), d.device.as_str(), d.transformer_dtype.as_str()), ("tiny", "Cpu", "fp32"));
    assert_eq!((d.scheduler.max_active, d.scheduler.memory_bytes), (3, 1234 << 20));
    // CPU defaults: no batching; max_stretch 0 means off.
    assert_eq!((d.scheduler.max_batch, d.scheduler.max_stretch), (1, None));
    assert_eq!(d.metric_hooks, ["embedding_cache"]);
    assert!(d.plugins.is_empty() && d.world.is_none() && d.weight_updates);
    assert_eq!(d.model_dir, crate::default_model().unwrap());
    // Building twice from one config gives the same description: what front ends compare.
    assert_eq!(build_engine(&cfg).unwrap().description, *d);
}

#[test]
fn models_sharing_a_rewriter_folder_share_one_copy() {
    let cfg = crate::ModelConfig::default();
    let dir = crate::default_model().unwrap();
    let a = cfg.load_extender(&dir, tch::Device::Cpu).unwrap().expect("the default model has one");
    let b = cfg.load_extender(&dir, tch::Device::Cpu).unwrap().unwrap();
    assert!(std::sync::Arc::ptr_eq(&a, &b));
    // Without a folder and without the flag: none.
    let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny-wan");
    assert!(cfg.load_extender(&tiny, tch::Device::Cpu).unwrap().is_none());
    // A missing --prompt-extender folder is an error naming the flag.
    let bad = crate::ModelConfig { prompt_extender: Some("/nonexistent".into()), ..Default::default() };
    let Err(e) = bad.load_extender(&tiny, tch::Device::Cpu) else { panic!("loaded a missing folder") };
    let e = format!("{e:#}");
    assert!(e.contains("--prompt-extender"), "{e}");
}
