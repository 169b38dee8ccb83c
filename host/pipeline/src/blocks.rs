//! Block-level policies (block caches such as FBCache/DBCache): around one transformer forward
//! they see each block's input and output and may jump ahead with a substituted hidden state.
//! Models iterate their blocks in one place (`run_blocks`) and call a [`BlockHook`] there.

use anyhow::Result;
use fastvideo_request::{OmniEvent, ResolvedRequest};
use tch::Tensor;

use crate::guidance::StepCtx;
use crate::meter::PluginMeter;

/// What to do after a block.
pub enum BlockAction {
    /// Run the next block as usual.
    Proceed,
    /// Continue at block `to` (the block count = past the last) with this hidden state.
    SkipTo(usize, Tensor),
}

/// One forward's view of a block policy, as the model's `run_blocks` calls it.
pub trait BlockHook {
    /// Before the first block of a forward that runs `num_blocks` blocks.
    fn begin(&mut self, num_blocks: usize) -> Result<()>;
    /// After block `index` turned `input` into `output` (hidden states); says where to go next.
    fn after_block(&mut self, index: usize, input: &Tensor, output: &Tensor) -> Result<BlockAction>;
    /// After the block loop, with the final hidden state.
    fn end(&mut self, hidden: &Tensor) -> Result<()>;
}

/// A block policy bound when the pipeline is built; per-request state comes from `init`.
pub trait BlockPolicy: Send + Sync {
    /// Called once per request when its denoise loop starts; an error fails that request only.
    fn init(&self, req: &ResolvedRequest, meter: &PluginMeter) -> Result<Box<dyn BlockPolicyState>>;
}

/// A request's block-policy state; calls carry the step and the guidance branch, so a cache can
/// keep one set of residuals per branch.
pub trait BlockPolicyState: Send {
    /// [`BlockHook::begin`] for one forward of `branch` at `step`.
    fn begin(&mut self, step: &StepCtx, branch: &str, num_blocks: usize) -> Result<()>;
    /// [`BlockHook::after_block`] for one forward of `branch` at `step`.
    fn after_block(
        &mut self,
        step: &StepCtx,
        branch: &str,
        index: usize,
        input: &Tensor,
        output: &Tensor,
    ) -> Result<BlockAction>;
    /// [`BlockHook::end`] for one forward of `branch` at `step`.
    fn end(&mut self, step: &StepCtx, branch: &str, hidden: &Tensor) -> Result<()>;
    /// Events for the request's stream (a plugin's `events.emit`), collected after each step:
    /// they go to that request and nowhere else.
    fn take_events(&mut self) -> Vec<OmniEvent> {
        Vec::new()
    }
}

/// Binds a request's state to one forward (step, branch) as a [`BlockHook`].
pub struct BoundHook<'a> {
    /// The request's block-policy state.
    pub state: &'a mut dyn BlockPolicyState,
    /// The step this forward belongs to.
    pub step: &'a StepCtx<'a>,
    /// The guidance branch this forward evaluates.
    pub branch: &'a str,
}

impl BlockHook for BoundHook<'_> {
    fn begin(&mut self, num_blocks: usize) -> Result<()> {
        self.state.begin(self.step, self.branch, num_blocks)
    }
    fn after_block(&mut self, index: usize, input: &Tensor, output: &Tensor) -> Result<BlockAction> {
        self.state.after_block(self.step, self.branch, index, input, output)
    }
    fn end(&mut self, hidden: &Tensor) -> Result<()> {
        self.state.end(self.step, self.branch, hidden)
    }
}
