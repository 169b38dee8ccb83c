//! DBCache, after cache-dit's "dual block cache": every forward computes the first `fn_blocks`
//! blocks and compares their residual (output minus the hidden state entering block 0) with the
//! one from the last fully computed forward of the same guidance branch, by relative L1. Below
//! `residual_diff_threshold` the middle blocks are skipped: their cached residual is added to
//! the hidden state and the forward continues at the last `bn_blocks` blocks. FBCache is the
//! `fn_blocks = 1, bn_blocks = 0` case. `warmup_steps` always compute; `max_cached_steps` caps
//! the skips per branch (0 = no cap). Each skip emits a `dbcache.hit` event.

use std::cell::RefCell;
use std::collections::BTreeMap;

use fastvideo_plugin_sdk::{events, tensor_ops as ops, BlockAction, BlockInterceptor, StepContext, Tensor};

#[derive(Clone, Copy, serde::Deserialize)]
#[serde(default)]
struct Params {
    fn_blocks: u32,
    bn_blocks: u32,
    residual_diff_threshold: f32,
    warmup_steps: u32,
    max_cached_steps: u32,
}

impl Default for Params {
    fn default() -> Self {
        Self { fn_blocks: 1, bn_blocks: 0, residual_diff_threshold: 0.08, warmup_steps: 1, max_cached_steps: 0 }
    }
}

/// What one guidance branch remembers across steps.
#[derive(Default)]
struct Branch {
    /// Residual of the first Fn blocks at the last computed forward.
    prev_fn_residual: Option<Tensor>,
    /// Residual the middle blocks added at the last computed forward.
    middle_residual: Option<Tensor>,
    hits: u32,
    // Per forward:
    entry: Option<Tensor>,
    after_fn: Option<Tensor>,
    computing: bool,
}

thread_local! {
    static PARAMS: RefCell<Params> = RefCell::new(Params::default());
    static BRANCHES: RefCell<BTreeMap<String, Branch>> = const { RefCell::new(BTreeMap::new()) };
    static NUM_BLOCKS: RefCell<u32> = const { RefCell::new(0) };
}

fn branch_name(ctx: &StepContext) -> String {
    ctx.branch.clone().unwrap_or_default()
}

struct DbCache;

impl BlockInterceptor for DbCache {
    fn init(params: String) -> Result<(), String> {
        let p: Params = serde_json::from_str(&params).map_err(|e| format!("dbcache params: {e}"))?;
        if p.fn_blocks == 0 {
            return Err("dbcache: fn_blocks must be at least 1".into());
        }
        PARAMS.set(p);
        Ok(())
    }

    fn begin_forward(ctx: StepContext, num_blocks: u32) -> Result<(), String> {
        let p = PARAMS.with_borrow(|p| *p);
        if p.fn_blocks + p.bn_blocks >= num_blocks {
            return Err(format!(
                "dbcache: fn_blocks {} + bn_blocks {} leave no middle blocks of {num_blocks}",
                p.fn_blocks, p.bn_blocks
            ));
        }
        NUM_BLOCKS.set(num_blocks);
        BRANCHES.with_borrow_mut(|b| {
            let br = b.entry(branch_name(&ctx)).or_default();
            br.entry = None;
            br.after_fn = None;
            br.computing = true;
        });
        Ok(())
    }

    fn after_block(ctx: StepContext, index: u32, input: &Tensor, output: &Tensor) -> Result<BlockAction, String> {
        let p = PARAMS.with_borrow(|p| *p);
        let n = NUM_BLOCKS.with_borrow(|n| *n);
        BRANCHES.with_borrow_mut(|b| {
            let br = b.entry(branch_name(&ctx)).or_default();
            if index == 0 {
                br.entry = Some(input.share());
            }
            if index + 1 == p.fn_blocks {
                let entry = br.entry.as_ref().ok_or("dbcache: block 0 was not seen")?;
                let residual = ops::sub(output, entry)?;
                let capped = p.max_cached_steps > 0 && br.hits >= p.max_cached_steps;
                if ctx.step_index >= p.warmup_steps && !capped {
                    if let (Some(prev), Some(middle)) = (&br.prev_fn_residual, &br.middle_residual) {
                        if ops::relative_l1(&residual, prev)? < p.residual_diff_threshold {
                            br.hits += 1;
                            br.computing = false;
                            events::emit(
                                "dbcache.hit",
                                &format!("{{\"step\":{},\"branch\":\"{}\"}}", ctx.step_index, branch_name(&ctx)),
                            );
                            return Ok(BlockAction::SkipTo((n - p.bn_blocks, ops::add(output, middle)?)));
                        }
                    }
                }
                br.prev_fn_residual = Some(residual);
                br.after_fn = Some(output.share());
            }
            if br.computing && index + 1 == n - p.bn_blocks {
                let after_fn = br.after_fn.as_ref().ok_or("dbcache: Fn blocks were not seen")?;
                br.middle_residual = Some(ops::sub(output, after_fn)?);
            }
            Ok(BlockAction::Proceed)
        })
    }

    fn end_forward(ctx: StepContext, _hidden: &Tensor) -> Result<(), String> {
        BRANCHES.with_borrow_mut(|b| {
            if let Some(br) = b.get_mut(&branch_name(&ctx)) {
                br.entry = None;
                br.after_fn = None;
            }
        });
        Ok(())
    }
}

fastvideo_plugin_sdk::export_block_interceptor!(DbCache);
fastvideo_plugin_sdk::manifest! {
    name: "dbcache",
    version: "0.1.0",
    kind: block_interceptor,
    hooks: [begin_forward, after_block, end_forward],
    distribution_altering: true,
    description: "DBCache / FBCache block cache",
    params_schema: {
        "type": "object",
        "properties": {
            "fn_blocks": {"type": "integer", "minimum": 1},
            "bn_blocks": {"type": "integer", "minimum": 0},
            "residual_diff_threshold": {"type": "number", "minimum": 0},
            "warmup_steps": {"type": "integer", "minimum": 0},
            "max_cached_steps": {"type": "integer", "minimum": 0}
        },
        "additionalProperties": false
    },
}
