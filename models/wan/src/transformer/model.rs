//! `WanTransformer3DModel` itself: patchify, the timestep and text embeddings, the block loop
//! (one place, so block policies can skip blocks), the adaLN output head and unpatchify.

use std::sync::{Arc, Mutex};

use anyhow::{ensure, Result};
use fastvideo_layers::adapters::LinearAdapters;
use fastvideo_layers::sequence_parallel::SequenceShard;
use fastvideo_layers::{Linear, Lora};
use fastvideo_lora::{LoraFile, TargetModule};
use fastvideo_parallel::Communicator;
use fastvideo_pipeline::{AdapterRows, AdapterSet, BlockAction, BlockHook, PreparedAdapter};
use tch::{Device, Kind, Tensor};

use fastvideo_layers::block_stream::{self, BlockStream, StreamPlan};

use super::arrivals::{block_group, Arrivals, HEAD_GROUP};
use super::block::{modulation, Block, BlockInputs};
use super::config::TransformerConfig;
use super::image_embedder::ImageEmbedder;
use super::rope::{Rope, RopeKey};
use crate::weights::Weights;

/// The Wan 2.1 diffusion transformer.
pub struct WanTransformer3DModel {
    /// Its config.
    pub cfg: TransformerConfig,
    patch_weight: Tensor,
    patch_bias: Tensor,
    time_1: Linear,
    time_2: Linear,
    time_proj: Linear,
    text_1: Linear,
    text_2: Linear,
    /// Image-conditioned models' (`image_dim` set) CLIP-states embedder.
    image_embedder: Option<ImageEmbedder>,
    /// The transformer blocks, in order.
    pub blocks: Vec<Block>,
    proj_out: Linear,
    scale_shift_table: Tensor,
    /// Rotary tables of the last grid seen: every step (and every guidance branch) of a request
    /// reuses them instead of rebuilding them on the host and copying them to the device.
    rope_cache: Mutex<Option<(RopeKey, Rope)>>,
    /// The compute dtype (weights were converted to it at load).
    kind: Kind,
    /// Its linear modules as adapters see them, and the set merged into the weights, if any.
    adapters: LinearAdapters,
    /// Weight groups still being copied in (an offloaded expert): forwards wait for each.
    pub arrivals: Arrivals,
    /// `--max-device-memory`: the last blocks' linears wait in host memory and pass through
    /// device slots, one block at a time.
    stream: Option<BlockStream>,
}

// SAFETY: every tensor is written once in `new` and only read afterwards, except by
// `merge_adapters`/`unmerge_adapters`, which their callers run between forwards (the executor's
// thread); libtorch allows concurrent reads of a tensor from several threads.
unsafe impl Sync for WanTransformer3DModel {}

impl WanTransformer3DModel {
    /// Builds the transformer from `w` in `cfg`'s shape, converting weights to `w`'s dtype.
    pub fn new(cfg: TransformerConfig, w: &Weights) -> Result<Self> {
        Self::new_streamed(cfg, w, None)
    }

    /// [`new`](Self::new), with the blocks `plan` names streamed from host memory: each parked
    /// there as it loads, so the device never holds more than one of them at load.
    pub fn new_streamed(cfg: TransformerConfig, w: &Weights, plan: Option<StreamPlan>) -> Result<Self> {
        let dim = cfg.inner_dim();
        let [pt, ph, pw] = cfg.patch_size;
        let ce = w.pp("condition_embedder");
        // diffusers keeps the timestep embedder and the modulation tables in float32.
        let time = ce.pp("time_embedder").with_kind(Kind::Float);
        let mut blocks = Vec::with_capacity(cfg.num_layers as usize);
        let mut parked = Vec::new();
        for i in 0..cfg.num_layers as usize {
            let block = Block::new(&w.pp("blocks").pp(i), &cfg)?;
            if plan.is_some_and(|p| i >= p.first) {
                parked.push(block_stream::park(&block_linears(&block), w.device()));
            }
            blocks.push(block);
        }
        let stream = match plan {
            Some(p) if !parked.is_empty() => Some(BlockStream::new(p.first, parked, p.slots, w.device())?),
            _ => None,
        };
        Ok(Self {
            patch_weight: w.get("patch_embedding.weight", &[dim, cfg.in_channels, pt, ph, pw])?,
            patch_bias: w.get("patch_embedding.bias", &[dim])?,
            time_1: Linear::new(&time.pp("linear_1"), cfg.freq_dim, dim, true)?,
            time_2: Linear::new(&time.pp("linear_2"), dim, dim, true)?,
            time_proj: Linear::new(&ce.pp("time_proj"), dim, 6 * dim, true)?,
            text_1: Linear::new(&ce.pp("text_embedder.linear_1"), cfg.text_dim, dim, true)?,
            text_2: Linear::new(&ce.pp("text_embedder.linear_2"), dim, dim, true)?,
            image_embedder: cfg
                .image_dim
                .map(|d| ImageEmbedder::new(&ce.pp("image_embedder"), d, dim, cfg.pos_embed_seq_len))
                .transpose()?,
            blocks,
            proj_out: Linear::new(&w.pp("proj_out"), dim, cfg.out_channels() * pt * ph * pw, true)?,
            scale_shift_table: w.with_kind(Kind::Float).get("scale_shift_table", &[1, 2, dim])?,
            kind: w.kind(),
            rope_cache: Mutex::new(None),
            adapters: LinearAdapters::new(w.linears()),
            arrivals: Arrivals::default(),
            stream,
            cfg,
        })
    }

    /// The blocks streamed from host memory, if any (`--max-device-memory`).
    pub fn block_stream(&self) -> Option<&BlockStream> {
        self.stream.as_ref()
    }

    /// The linear modules adapters may target, by slot.
    pub fn modules(&self) -> &[TargetModule] {
        self.adapters.modules()
    }

    /// Each module's weight dtype, by slot: the compute dtype, or float32 for the modules kept
    /// in full precision (the timestep embedder). Adapter tensors take their module's.
    pub fn module_kinds(&self) -> Vec<Kind> {
        self.adapters.kinds(&self.linears(), self.kind)
    }

    /// Every linear, in a fixed order (merging walks them; tests compare their weights).
    pub fn linears(&self) -> Vec<&Linear> {
        self.linear_groups().into_iter().flatten().collect()
    }

    /// `--fp8-linears`: stores the linears of every block but the first and the last in FP8
    /// ([`fp8_block`] names them)
    /// (the boundary blocks stay in the compute dtype, which keeps quality; docs/benchmarks.md).
    /// At load, before the model is shared.
    pub fn quantize_fp8(&mut self) {
        let n = self.blocks.len();
        for b in self.blocks.iter_mut().take(n.saturating_sub(1)).skip(1) {
            b.quantize_fp8();
        }
    }

    /// `--int8-attention` / `--int8-qk-attention`: every block's self-attention in 8-bit with
    /// that recipe (see `fastvideo_kernels::attention8`), or none. On CUDA without the kernel it
    /// is SDPA; on a CPU the quantized function is computed (emulated in float32), so an
    /// evaluation measures it.
    pub fn set_int8_attention(&mut self, recipe: Option<fastvideo_torch::Int8Attention>) {
        for b in &mut self.blocks {
            b.set_int8_attention(recipe);
        }
    }

    /// Whether any linear is stored quantized (FP8, or a GGUF file's blocks): adapters then
    /// run unmerged.
    pub fn has_quantized_linears(&self) -> bool {
        self.linears().iter().any(|l| l.is_quantized())
    }

    /// The linears by the group a forward reads them in ([`Arrivals`]): first those outside the
    /// blocks (embedders and output head), then each block's.
    pub fn linear_groups(&self) -> Vec<Vec<&Linear>> {
        let mut head = vec![&self.time_1, &self.time_2, &self.time_proj, &self.text_1, &self.text_2];
        if let Some(e) = &self.image_embedder {
            e.linears(&mut head);
        }
        head.push(&self.proj_out);
        let mut groups = vec![head];
        groups.extend(self.blocks.iter().map(block_linears));
        groups
    }

    /// `file` prepared for this model (checked against its modules, on its device and dtype).
    pub fn prepare_adapter(&self, file: &LoraFile, name: &str, hash: &str) -> Result<PreparedAdapter> {
        self.adapters.prepare(file, name, hash, self.patch_device(), &self.module_kinds())
    }

    /// Merges `set` into the weights (after unmerging another set, if one is merged): forwards
    /// then run rows with exactly this set at the plain model's cost. Call between forwards only.
    pub fn merge_adapters(&self, set: &AdapterSet) -> Result<()> {
        self.refuse_merge_while_streaming()?;
        self.adapters.merge(&self.linears(), set)
    }

    /// Merges `set` for good (no originals kept): a weight update made of an adapter. Only on a
    /// model no forward uses yet.
    pub fn merge_permanently(&self, set: &AdapterSet) -> Result<()> {
        self.refuse_merge_while_streaming()?;
        self.adapters.merge_permanently(&self.linears(), set)
    }

    /// A streamed block's weights live in host memory and a device slot by turns: a merge
    /// would change whichever copy the block points at now, and the next refill would undo it.
    fn refuse_merge_while_streaming(&self) -> Result<()> {
        ensure!(
            self.stream.is_none(),
            "adapters cannot be merged into blocks streamed from host memory (--max-device-memory); they run unmerged"
        );
        Ok(())
    }

    /// Restores the original weights (bit for bit) if a set is merged. Call between forwards only.
    pub fn unmerge_adapters(&self) {
        self.adapters.unmerge(&self.linears())
    }

    /// The key of the merged set, if any.
    pub fn merged_adapters(&self) -> Option<String> {
        self.adapters.merged()
    }

    /// The row groups still to add unmerged: those whose set is not the merged one.
    fn unmerged_rows<'a>(&self, rows: Option<&AdapterRows<'a>>, batch: i64) -> Result<Option<AdapterRows<'a>>> {
        self.adapters.unmerged_rows(rows, batch).map_err(|e| anyhow::anyhow!("transformer: {e}"))
    }

    /// Sinusoidal timestep features (`flip_sin_to_cos`, no frequency shift): `[B, freq_dim]`.
    fn timestep_features(&self, t: &Tensor) -> Tensor {
        fastvideo_layers::timestep::sinusoidal(t, self.cfg.freq_dim)
    }

    fn rope(&self, f: i64, h: i64, w: i64, device: Device) -> Rope {
        self.rope_at(f, h, w, 0, device)
    }

    /// Tables for frames `first..first + f` (a causal chunk's), cached like [`rope`](Self::rope):
    /// a chunk's denoise steps and its commit pass share them.
    pub(crate) fn rope_at(&self, f: i64, h: i64, w: i64, first: i64, device: Device) -> Rope {
        let key = (f, h, w, first, device);
        let mut cache = self.rope_cache.lock().unwrap_or_else(|e| e.into_inner());
        match &*cache {
            Some((k, r)) if *k == key => r.shallow_clone(),
            _ => {
                let r = Rope::at(self.cfg.attention_head_dim, [f, h, w], first, device);
                *cache = Some((key, r.shallow_clone()));
                r
            }
        }
    }

    /// Runs the transformer blocks in order: the single place blocks are iterated, so a block
    /// policy (a block cache) can skip a range of them through `hook` without touching the model.
    pub fn run_blocks(&self, mut x: Tensor, inputs: &BlockInputs, hook: Option<&mut dyn BlockHook>) -> Result<Tensor> {
        let n = self.blocks.len();
        let Some(hook) = hook else {
            for i in 0..n {
                x = self.run_block(i, &x, inputs)?;
            }
            return Ok(x);
        };
        hook.begin(n)?;
        let mut i = 0;
        while i < n {
            let out = self.run_block(i, &x, inputs)?;
            match hook.after_block(i, &x, &out)? {
                BlockAction::Proceed => {
                    x = out;
                    i += 1;
                }
                BlockAction::SkipTo(to, hidden) => {
                    ensure!(to > i && to <= n, "block policy: skip from block {i} to {to} (of {n})");
                    ensure!(
                        hidden.size() == out.size(),
                        "block policy: hidden state {:?} where blocks produce {:?}",
                        hidden.size(),
                        out.size()
                    );
                    // Skipped blocks pass their slots on as run ones do (block streaming).
                    if let Some(s) = &self.stream {
                        (i + 1..to).try_for_each(|k| s.after(k))?;
                    }
                    x = hidden;
                    i = to;
                }
            }
        }
        hook.end(&x)?;
        Ok(x)
    }

    /// Block `i` once its weights are on the device (an offloaded expert's arriving, a streamed
    /// block's slot).
    fn run_block(&self, i: usize, x: &Tensor, inputs: &BlockInputs) -> Result<Tensor> {
        self.arrivals.await_group(block_group(i))?;
        let Some(s) = &self.stream else { return self.blocks[i].forward(x, inputs) };
        s.before(i, &block_linears(&self.blocks[i]))?;
        let out = self.blocks[i].forward(x, inputs)?;
        s.after(i)?;
        Ok(out)
    }

    /// `latents [B, C, F, H, W]`, `timestep [B]`, `context [B, L, text_dim]` → velocity with the
    /// latents' shape and dtype. Inputs of any float dtype are cast to the compute dtype.
    pub fn forward(&self, latents: &Tensor, timestep: &Tensor, context: &Tensor) -> Result<Tensor> {
        self.forward_hooked(latents, timestep, context, None, None)
    }

    /// [`forward`](Self::forward) with the image conditioning of an image-to-video model
    /// (`image`: CLIP hidden states `[B, T, image_dim]`, or `[2B, T, image_dim]` first and last
    /// frame for FLF2V; diffusers' `encoder_hidden_states_image`) and an optional block hook
    /// (see [`run_blocks`](Self::run_blocks)).
    pub fn forward_hooked(
        &self,
        latents: &Tensor,
        timestep: &Tensor,
        context: &Tensor,
        image: Option<&Tensor>,
        hook: Option<&mut dyn BlockHook>,
    ) -> Result<Tensor> {
        self.forward_adapted(latents, timestep, context, image, None, hook)
    }

    /// [`forward_hooked`](Self::forward_hooked) with LoRA adapters per row group (`lora`): a
    /// merged set costs nothing here, other sets run unmerged.
    pub fn forward_adapted(
        &self,
        latents: &Tensor,
        timestep: &Tensor,
        context: &Tensor,
        image: Option<&Tensor>,
        lora: Option<&AdapterRows>,
        hook: Option<&mut dyn BlockHook>,
    ) -> Result<Tensor> {
        self.check_inputs(latents, timestep, context)?;
        self.arrivals.await_group(HEAD_GROUP)?;
        let rows = self.unmerged_rows(lora, latents.size()[0])?;
        let lora = rows.as_ref();
        let [_, f, h, w] = self.grid(latents);
        let rope = self.rope(f, h, w, latents.device());
        let image = self.image_context(image, latents.size()[0], lora)?;
        let x = self.patchify(latents);
        let (temb, temb6) = match timestep.dim() {
            // One timestep per latent frame (Wan 2.2 TI2V: the given first frame at 0): the
            // adapters' rows repeat per frame in the embedding, which then repeats per token.
            2 => {
                let frame_rows = lora.map(|r| r.repeat_rows(f));
                per_token(self.time_embedding_lora(timestep, None, frame_rows.as_ref()), h * w)
            }
            _ => self.time_embedding_lora(timestep, None, lora),
        };
        let context = self.text_context_lora(context, lora);
        let inputs =
            BlockInputs { context: &context, image: image.as_ref(), temb6: &temb6, rope: &rope, shard: None, lora };
        let x = self.run_blocks(x, &inputs, hook)?;
        Ok(self.unpatchify(&self.head_tokens(&x, &temb, lora), latents))
    }

    /// Whether the model is image-conditioned (it then needs an image context every forward).
    pub fn takes_image(&self) -> bool {
        self.image_embedder.is_some()
    }

    /// The embedded image tokens for `rows` samples: required by an image-conditioned model,
    /// refused by a text-only one.
    fn image_context(&self, image: Option<&Tensor>, rows: i64, lora: Lora) -> Result<Option<Tensor>> {
        match (&self.image_embedder, image) {
            (None, None) => Ok(None),
            (Some(_), None) => anyhow::bail!("transformer: this image-to-video model needs image embeddings"),
            (None, Some(_)) => {
                anyhow::bail!("transformer: image embeddings given to a text-only model (image_dim is null)")
            }
            (Some(e), Some(image)) => {
                let x = e.forward(image, lora)?;
                ensure!(
                    x.size()[0] == rows,
                    "transformer: image embeddings {:?} make {} rows; the latents have {rows}",
                    image.size(),
                    x.size()[0]
                );
                Ok(Some(x))
            }
        }
    }

    /// Shapes of a forward's inputs, and the grid against the rotary table's length.
    fn check_inputs(&self, latents: &Tensor, timestep: &Tensor, context: &Tensor) -> Result<()> {
        let s = latents.size();
        let [pt, ph, pw] = self.cfg.patch_size;
        ensure!(
            s.len() == 5 && s[1] == self.cfg.in_channels && s[2] % pt == 0 && s[3] % ph == 0 && s[4] % pw == 0,
            "transformer: latents {s:?} must be [B, {}, F, H, W] divisible by patch {:?}",
            self.cfg.in_channels,
            self.cfg.patch_size
        );
        let c = context.size();
        ensure!(
            c.len() == 3 && c[0] == s[0] && c[2] == self.cfg.text_dim,
            "transformer: context {c:?} must be [{}, L, {}]",
            s[0],
            self.cfg.text_dim
        );
        let [_, f, h, w] = self.grid(latents);
        let t = timestep.size();
        ensure!(
            t == [s[0]] || t == [s[0], f],
            "transformer: timestep {t:?} must be [{}], or [{}, {f}] (one per latent frame)",
            s[0],
            s[0]
        );
        ensure!(
            f.max(h).max(w) <= self.cfg.rope_max_seq_len,
            "transformer: grid {f}x{h}x{w} exceeds rope_max_seq_len {}",
            self.cfg.rope_max_seq_len
        );
        Ok(())
    }

    /// One rank's part of a sequence-parallel forward: the same inputs as
    /// [`forward`](Self::forward) on every rank of the group, this rank's slice of the tokens
    /// through the blocks (exchanging with the others around self-attention), and its slice of
    /// the output tokens `[B, n, C·pt·ph·pw]` back, for [`unpatchify`](Self::unpatchify) once the
    /// slices are joined in rank order.
    pub fn forward_rank(
        &self,
        latents: &Tensor,
        timestep: &Tensor,
        context: &Tensor,
        image: Option<&Tensor>,
        comm: Arc<dyn Communicator>,
    ) -> Result<Tensor> {
        self.check_inputs(latents, timestep, context)?;
        let image = self.image_context(image, latents.size()[0], None)?;
        let [_, f, h, w] = self.grid(latents);
        let shard = SequenceShard::new(comm, f * h * w, self.cfg.num_attention_heads)?;
        let (start, len) = (shard.start(), shard.len());
        let rope = self.rope(f, h, w, latents.device()).rows(start, len);
        // Contiguous, as the fused norm kernels need (a slice of several rows is not; the tch
        // fallback they would take rounds differently from the one-device forward).
        let x = self.patchify(latents).narrow(1, start, len).contiguous();
        let (temb, temb6) = self.time_embedding(timestep);
        let context = self.text_context(context);
        let inputs = BlockInputs {
            context: &context,
            image: image.as_ref(),
            temb6: &temb6,
            rope: &rope,
            shard: Some(&shard),
            lora: None,
        };
        let x = self.run_blocks(x, &inputs, None)?;
        Ok(self.head_tokens(&x, &temb, None))
    }

    /// `[B, F, H, W]` of the token grid (after patching) of `latents [B, C, F·pt, H·ph, W·pw]`.
    pub(crate) fn grid(&self, latents: &Tensor) -> [i64; 4] {
        let s = latents.size();
        let [pt, ph, pw] = self.cfg.patch_size;
        [s[0], s[2] / pt, s[3] / ph, s[4] / pw]
    }

    /// Latents → tokens `[B, N, dim]` in the compute dtype.
    pub(crate) fn patchify(&self, latents: &Tensor) -> Tensor {
        let [pt, ph, pw] = self.cfg.patch_size;
        latents
            .to_kind(self.kind)
            .conv3d(&self.patch_weight, Some(&self.patch_bias), [pt, ph, pw], [0, 0, 0], [1, 1, 1], 1)
            .flatten(2, -1)
            .transpose(1, 2)
            .contiguous()
    }

    /// `(temb, temb6)` for `timestep [B]`: `[B, dim]` (compute dtype) and `[B, 6, dim]` (fp32);
    /// for per-frame timesteps `[B, F]`: `[B, F, dim]` and `[B, F, 6, dim]`. The embedding runs in
    /// float32 and is cast to the compute dtype, as in diffusers; `temb6` is cast once here
    /// rather than in each block (they add it to their fp32 tables).
    pub(crate) fn time_embedding(&self, timestep: &Tensor) -> (Tensor, Tensor) {
        self.time_embedding_with(timestep, None)
    }

    /// [`time_embedding`](Self::time_embedding) with `extra` (e.g. an action embedding,
    /// `[B, F, dim]` per frame) added to `temb` before the modulation is projected from it;
    /// a `[B]` timestep then broadcasts over the frames.
    pub(crate) fn time_embedding_with(&self, timestep: &Tensor, extra: Option<&Tensor>) -> (Tensor, Tensor) {
        self.time_embedding_lora(timestep, extra, None)
    }

    /// [`time_embedding_with`](Self::time_embedding_with) with adapters per row; `lora` needs a
    /// `[B]` timestep (its rows are the batch's).
    pub(crate) fn time_embedding_lora(
        &self,
        timestep: &Tensor,
        extra: Option<&Tensor>,
        lora: Lora,
    ) -> (Tensor, Tensor) {
        let lead = timestep.size();
        let flat = timestep.reshape([-1]);
        let t1 = self.time_1.forward_lora(&self.timestep_features(&flat), lora);
        let temb = self.time_2.forward_lora(&t1.silu(), lora).to_kind(self.kind);
        let dim = self.cfg.inner_dim();
        let temb = temb.view([lead.as_slice(), &[dim]].concat().as_slice());
        let temb = match extra {
            // One value for every frame: stays per sample (the fused kernels' layout).
            Some(e) if temb.dim() == 2 && e.dim() == 3 && e.size()[1] == 1 => {
                temb + e.squeeze_dim(1).to_kind(self.kind)
            }
            Some(e) if temb.dim() == 2 && e.dim() == 3 => temb.unsqueeze(1) + e.to_kind(self.kind),
            Some(e) => temb + e.to_kind(self.kind),
            None => temb,
        };
        let mut shape = temb.size();
        shape.insert(shape.len() - 1, 6);
        let temb6 = self.time_proj.forward_lora(&temb.silu(), lora).to_kind(Kind::Float).view(shape.as_slice());
        (temb, temb6)
    }

    /// The text embedder: `[B, L, text_dim]` → `[B, L, dim]`.
    pub(crate) fn text_context(&self, context: &Tensor) -> Tensor {
        self.text_context_lora(context, None)
    }

    pub(crate) fn text_context_lora(&self, context: &Tensor, lora: Lora) -> Tensor {
        self.text_2.forward_lora(&self.text_1.forward_gelu_tanh_lora(&context.to_kind(self.kind), lora), lora)
    }

    /// Output norm, projection and unpatchify back to `like`'s shape and dtype. `temb` is
    /// `[B, dim]`, or `[B, N, dim]` per token.
    pub(crate) fn head(&self, x: &Tensor, temb: &Tensor, like: &Tensor) -> Tensor {
        self.head_lora(x, temb, like, None)
    }

    pub(crate) fn head_lora(&self, x: &Tensor, temb: &Tensor, like: &Tensor, lora: Lora) -> Tensor {
        self.unpatchify(&self.head_tokens(x, temb, lora), like)
    }

    /// Output norm and projection, per token: `[B, n, dim]` → `[B, n, C·pt·ph·pw]`.
    fn head_tokens(&self, x: &Tensor, temb: &Tensor, lora: Lora) -> Tensor {
        let temb = if temb.dim() == 2 { temb.unsqueeze(1) } else { temb.shallow_clone() };
        let m = modulation(&self.scale_shift_table, &temb.unsqueeze(2), 2);
        let spec =
            fastvideo_kernels::LayerNormSpec { eps: self.cfg.eps, affine: None, modulation: Some((&m[1], &m[0])) };
        let x = fastvideo_kernels::layer_norm_modulate(x, &spec);
        self.proj_out.forward_lora(&x, lora)
    }

    /// Output tokens `[B, N, C·pt·ph·pw]` back to `like`'s shape `[B, C, F, H, W]` and dtype.
    pub fn unpatchify(&self, tokens: &Tensor, like: &Tensor) -> Tensor {
        let [b, f, h, w] = self.grid(like);
        let [pt, ph, pw] = self.cfg.patch_size;
        let x = tokens.to_kind(like.kind());
        let x = x.view(&[b, f, h, w, pt, ph, pw, -1][..]).permute([0, 7, 1, 4, 2, 5, 3, 6]);
        x.reshape([b, -1, f * pt, h * ph, w * pw])
    }

    /// The device the weights are on.
    pub fn patch_device(&self) -> Device {
        self.patch_weight.device()
    }

    /// The compute dtype.
    pub fn kind(&self) -> Kind {
        self.kind
    }
}

/// Per-frame embeddings (`temb [B, F, dim]`, `temb6 [B, F, 6, dim]`) repeated for each of a
/// frame's tokens; per-sample ones (`[B, dim]`, `[B, 6, dim]`) stay as they are.
pub(crate) fn per_token((temb, temb6): (Tensor, Tensor), tokens: i64) -> (Tensor, Tensor) {
    if temb.dim() == 3 {
        (temb.repeat_interleave_self_int(tokens, 1, None), temb6.repeat_interleave_self_int(tokens, 1, None))
    } else {
        (temb, temb6)
    }
}

/// Whether the checkpoint key `key` lies in a block `--fp8-linears` stores in FP8 (every block
/// of `n` but the first and the last).
pub fn fp8_block(key: &str, n: usize) -> bool {
    let block = key.strip_prefix("blocks.").and_then(|r| r.split('.').next()).and_then(|i| i.parse::<usize>().ok());
    block.is_some_and(|i| i > 0 && i + 1 < n)
}

/// A block's linears in the order offloading walks them.
fn block_linears(b: &Block) -> Vec<&Linear> {
    let mut g = Vec::new();
    b.linears(&mut g);
    g
}
