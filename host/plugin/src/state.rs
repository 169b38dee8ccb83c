//! What one plugin instance's store holds (its tensor handles, limits, log attribution) and the
//! host side of every imported interface. Tensor arithmetic runs here, on the tensors' device.

use std::sync::Arc;

use tch::{Kind, Tensor};
use wasmtime::component::{Resource, ResourceTable};

use crate::bindings::fastvideo::plugin::{clock, events, log, tensor, tensor_ops, tensor_read, types};

/// A host tensor a plugin holds a handle to (a shallow clone: no data is copied).
pub struct PluginTensor(pub Tensor);

/// An event a plugin emitted, tagged with the plugin's name.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginEvent {
    /// The emitting plugin's deploy name.
    pub plugin: String,
    /// The event's name as the plugin gave it, cut to 256 bytes.
    pub name: String,
    /// The payload, JSON by convention but not checked, cut to the deploy's `max_message_bytes`.
    pub payload_json: String,
}

/// Per-instance limits the host functions enforce.
#[derive(Debug, Clone, Copy)]
pub struct InstanceLimits {
    /// Tensor handles a plugin may hold at once.
    pub max_handles: usize,
    /// Elements `tensor-read` copies in at most.
    pub max_read_elements: usize,
    /// Log lines and events kept per instance; later ones are dropped and counted.
    pub max_log_lines: u32,
    /// Events kept per instance; later ones are dropped and counted.
    pub max_events: u32,
    /// Log lines and event payloads are cut to this many bytes.
    pub max_message_bytes: usize,
}

/// How much a plugin instance logged and emitted, and how much of it was dropped.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct OutputCounts {
    /// Log lines written to the host's log.
    pub log_lines: u32,
    /// Log lines dropped past the cap.
    pub dropped_log_lines: u32,
    /// Events kept.
    pub events: u32,
    /// Events dropped past the cap.
    pub dropped_events: u32,
}

/// Cuts `s` to at most `max` bytes on a character boundary, marking the cut.
fn cut(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push_str("…[cut]");
    }
    s
}

/// The instance's memory cap as a resource limiter: growth past it traps with [`MemoryCapHit`],
/// which the runtime recognises by type.
#[derive(Debug, Clone, Copy)]
pub struct MemoryCap {
    /// The most linear memory an instance may have, in bytes.
    pub bytes: usize,
}

/// A linear memory asked to grow past [`MemoryCap`].
#[derive(Debug, thiserror::Error)]
#[error("growing memory to {desired} bytes, past the {cap} byte cap")]
pub struct MemoryCapHit {
    /// The size the memory asked to grow to, in bytes.
    pub desired: usize,
    /// The cap, in bytes.
    pub cap: usize,
}

/// A plugin asked for a tensor handle past the deploy's cap.
#[derive(Debug, thiserror::Error)]
#[error("holds more than {0} tensor handles (the deploy's cap)")]
pub struct HandleCapHit(pub usize);

impl wasmtime::ResourceLimiter for MemoryCap {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.bytes {
            return Err(MemoryCapHit { desired, cap: self.bytes }.into());
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, _desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(true)
    }
}

/// The data of one instance's store: the plugin's tensor handles, its limits, the events it
/// emitted and its output counts. The host side of every imported interface is implemented on it.
pub struct HostState {
    pub(crate) plugin: Arc<str>,
    pub(crate) table: ResourceTable,
    pub(crate) live_handles: usize,
    pub(crate) instance_limits: InstanceLimits,
    pub(crate) limits: MemoryCap,
    pub(crate) events: Vec<PluginEvent>,
    pub(crate) counts: OutputCounts,
    /// Time host ops spent waiting for a GPU to finish queued work before reading a value,
    /// not yet handed back to the call deadline.
    device_wait: std::time::Duration,
    /// The same waits over the current call, never handed back: subtracted from the time
    /// attributed to the plugin.
    pub(crate) call_device_wait: std::time::Duration,
}

impl HostState {
    /// Lets the tensor's GPU finish the work queued before this op, timing the wait so the call
    /// deadline can give it back ([`take_device_wait_ticks`](Self::take_device_wait_ticks)).
    fn wait_for_device(&mut self, t: &Tensor) {
        if let tch::Device::Cuda(i) = t.device() {
            let t0 = std::time::Instant::now();
            tch::Cuda::synchronize(i as i64);
            self.device_wait += t0.elapsed();
            self.call_device_wait += t0.elapsed();
        }
    }

    /// The device wait since the last call, in epoch ticks (1 ms, rounded up), and resets it.
    pub(crate) fn take_device_wait_ticks(&mut self) -> u64 {
        let ms = self.device_wait.as_micros().div_ceil(1000) as u64;
        self.device_wait = std::time::Duration::ZERO;
        ms
    }

    /// Empty state for an instance of `plugin` (its deploy name, which logs and events carry).
    pub fn new(plugin: Arc<str>, instance_limits: InstanceLimits, limits: MemoryCap) -> Self {
        Self {
            plugin,
            table: ResourceTable::new(),
            live_handles: 0,
            instance_limits,
            limits,
            events: Vec::new(),
            counts: OutputCounts::default(),
            device_wait: std::time::Duration::ZERO,
            call_device_wait: std::time::Duration::ZERO,
        }
    }

    /// Hands a tensor to the plugin as a new handle, within the handle cap.
    pub fn push(&mut self, t: Tensor) -> wasmtime::Result<Resource<PluginTensor>> {
        if self.live_handles >= self.instance_limits.max_handles {
            return Err(HandleCapHit(self.instance_limits.max_handles).into());
        }
        self.live_handles += 1;
        Ok(self.table.push(PluginTensor(t))?)
    }

    /// The tensor behind a handle; an error for a handle this store does not hold.
    pub fn get(&self, r: &Resource<PluginTensor>) -> wasmtime::Result<&Tensor> {
        Ok(&self.table.get(r)?.0)
    }

    /// Takes a handle back (the plugin returned an owned tensor).
    pub fn take(&mut self, r: Resource<PluginTensor>) -> wasmtime::Result<Tensor> {
        let t = self.table.delete(r)?;
        self.live_handles -= 1;
        Ok(t.0)
    }

    /// Tensor handles the plugin holds now.
    pub fn live_handles(&self) -> usize {
        self.live_handles
    }

    /// Log lines and events so far, kept and dropped.
    pub fn output_counts(&self) -> OutputCounts {
        self.counts
    }

    /// Takes the events emitted since the last drain.
    pub fn drain_events(&mut self) -> Vec<PluginEvent> {
        std::mem::take(&mut self.events)
    }

    /// Runs a fallible tensor op: a tch error becomes the plugin-visible `err` string naming the
    /// op; success becomes a new handle.
    fn op(
        &mut self,
        name: &str,
        f: impl FnOnce(&Self) -> Result<Tensor, tch::TchError>,
    ) -> wasmtime::Result<Result<Resource<PluginTensor>, String>> {
        match f(self) {
            Ok(t) => Ok(Ok(self.push(t)?)),
            Err(e) => Ok(Err(format!("{name}: {}", first_line(&e.to_string())))),
        }
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

fn dims(d: &[i64]) -> Option<&[i64]> {
    if d.is_empty() {
        None
    } else {
        Some(d)
    }
}

impl types::Host for HostState {}

/// The clock's fixed point: the first time any plugin asks.
static CLOCK_ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

impl clock::Host for HostState {
    fn now_ns(&mut self) -> wasmtime::Result<u64> {
        let ns = CLOCK_ORIGIN.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64;
        Ok(ns / 1000 * 1000)
    }
}
impl tensor::Host for HostState {}

impl tensor::HostTensor for HostState {
    fn shape(&mut self, t: Resource<PluginTensor>) -> wasmtime::Result<Vec<i64>> {
        Ok(self.get(&t)?.size())
    }
    fn dtype(&mut self, t: Resource<PluginTensor>) -> wasmtime::Result<types::Dtype> {
        Ok(match self.get(&t)?.kind() {
            Kind::Half => types::Dtype::Float16,
            Kind::BFloat16 => types::Dtype::Bfloat16,
            Kind::Double => types::Dtype::Float64,
            Kind::Int64 => types::Dtype::Int64,
            Kind::Bool => types::Dtype::Boolean,
            _ => types::Dtype::Float32,
        })
    }
    fn numel(&mut self, t: Resource<PluginTensor>) -> wasmtime::Result<u64> {
        Ok(self.get(&t)?.numel() as u64)
    }
    fn share(&mut self, t: Resource<PluginTensor>) -> wasmtime::Result<Resource<PluginTensor>> {
        let shared = self.get(&t)?.shallow_clone();
        self.push(shared)
    }
    fn drop(&mut self, t: Resource<PluginTensor>) -> wasmtime::Result<()> {
        self.take(t).map(|_| ())
    }
}

type OpResult = wasmtime::Result<Result<Resource<PluginTensor>, String>>;

impl tensor_ops::Host for HostState {
    fn linear_combination(&mut self, terms: Vec<Resource<PluginTensor>>, weights: Vec<f32>) -> OpResult {
        if terms.len() != weights.len() || terms.is_empty() {
            return Ok(Err(format!(
                "linear-combination: {} terms and {} weights (need the same, non-zero count)",
                terms.len(),
                weights.len()
            )));
        }
        self.op("linear-combination", |s| {
            let mut acc = s.get(&terms[0]).map_err(to_tch)?.f_mul_scalar(weights[0] as f64)?;
            for (t, w) in terms.iter().zip(&weights).skip(1) {
                acc = acc.f_add(&s.get(t).map_err(to_tch)?.f_mul_scalar(*w as f64)?)?;
            }
            Ok(acc)
        })
    }
    fn scale(&mut self, x: Resource<PluginTensor>, factor: f32) -> wasmtime::Result<Resource<PluginTensor>> {
        let t = self.get(&x)? * factor as f64;
        self.push(t)
    }
    fn add(&mut self, a: Resource<PluginTensor>, b: Resource<PluginTensor>) -> OpResult {
        self.op("add", |s| s.get(&a).map_err(to_tch)?.f_add(s.get(&b).map_err(to_tch)?))
    }
    fn sub(&mut self, a: Resource<PluginTensor>, b: Resource<PluginTensor>) -> OpResult {
        self.op("sub", |s| s.get(&a).map_err(to_tch)?.f_sub(s.get(&b).map_err(to_tch)?))
    }
    fn mul(&mut self, a: Resource<PluginTensor>, b: Resource<PluginTensor>) -> OpResult {
        self.op("mul", |s| s.get(&a).map_err(to_tch)?.f_mul(s.get(&b).map_err(to_tch)?))
    }
    fn div(&mut self, a: Resource<PluginTensor>, b: Resource<PluginTensor>) -> OpResult {
        self.op("div", |s| s.get(&a).map_err(to_tch)?.f_div(s.get(&b).map_err(to_tch)?))
    }
    fn add_scalar(&mut self, x: Resource<PluginTensor>, value: f32) -> wasmtime::Result<Resource<PluginTensor>> {
        let t = self.get(&x)? + value as f64;
        self.push(t)
    }
    fn minimum(&mut self, a: Resource<PluginTensor>, b: Resource<PluginTensor>) -> OpResult {
        self.op("minimum", |s| s.get(&a).map_err(to_tch)?.f_minimum(s.get(&b).map_err(to_tch)?))
    }
    fn maximum(&mut self, a: Resource<PluginTensor>, b: Resource<PluginTensor>) -> OpResult {
        self.op("maximum", |s| s.get(&a).map_err(to_tch)?.f_maximum(s.get(&b).map_err(to_tch)?))
    }
    fn lerp(&mut self, a: Resource<PluginTensor>, b: Resource<PluginTensor>, t: f32) -> OpResult {
        self.op("lerp", |s| {
            let (a, b) = (s.get(&a).map_err(to_tch)?, s.get(&b).map_err(to_tch)?);
            a.f_add(&b.f_sub(a)?.f_mul_scalar(t as f64)?)
        })
    }
    fn mean(&mut self, x: Resource<PluginTensor>, d: Vec<i64>, keepdim: bool) -> OpResult {
        self.op("mean", |s| s.get(&x).map_err(to_tch)?.f_mean_dim(dims(&d), keepdim, None::<Kind>))
    }
    fn sum(&mut self, x: Resource<PluginTensor>, d: Vec<i64>, keepdim: bool) -> OpResult {
        self.op("sum", |s| s.get(&x).map_err(to_tch)?.f_sum_dim_intlist(dims(&d), keepdim, None::<Kind>))
    }
    fn abs_mean(&mut self, x: Resource<PluginTensor>) -> wasmtime::Result<f32> {
        let t = self.get(&x)?.shallow_clone();
        self.wait_for_device(&t);
        Ok(t.abs().mean(Kind::Float).double_value(&[]) as f32)
    }
    fn norm(&mut self, x: Resource<PluginTensor>, p: f32, d: Vec<i64>, keepdim: bool) -> OpResult {
        self.op("norm", |s| {
            let x = s.get(&x).map_err(to_tch)?;
            match dims(&d) {
                Some(d) => x.f_norm_scalaropt_dim(p as f64, d, keepdim),
                None => x.f_flatten(0, -1)?.f_norm_scalaropt_dim(p as f64, [0i64].as_slice(), keepdim),
            }
        })
    }
    fn relative_l1(
        &mut self,
        a: Resource<PluginTensor>,
        b: Resource<PluginTensor>,
    ) -> wasmtime::Result<Result<f32, String>> {
        let (a, b) = (self.get(&a)?.shallow_clone(), self.get(&b)?.shallow_clone());
        if a.size() != b.size() {
            return Ok(Err(format!("relative-l1: shapes {:?} and {:?} differ", a.size(), b.size())));
        }
        self.wait_for_device(&a);
        let num = (&a - &b).abs().mean(Kind::Float).double_value(&[]);
        let den = b.abs().mean(Kind::Float).double_value(&[]);
        Ok(Ok((num / den.max(1e-12)) as f32))
    }
    fn clamp(&mut self, x: Resource<PluginTensor>, min: f32, max: f32) -> wasmtime::Result<Resource<PluginTensor>> {
        let t = self.get(&x)?.clamp(min as f64, max as f64);
        self.push(t)
    }
    fn where_mask(
        &mut self,
        m: Resource<PluginTensor>,
        a: Resource<PluginTensor>,
        b: Resource<PluginTensor>,
    ) -> OpResult {
        self.op("where-mask", |s| {
            let mask = s.get(&m).map_err(to_tch)?.f_ne(0)?;
            s.get(&a).map_err(to_tch)?.f_where_self(&mask, s.get(&b).map_err(to_tch)?)
        })
    }
    fn item(&mut self, x: Resource<PluginTensor>) -> wasmtime::Result<Result<f32, String>> {
        let x = self.get(&x)?.shallow_clone();
        if x.numel() != 1 {
            return Ok(Err(format!("item: tensor of shape {:?} has {} elements, not 1", x.size(), x.numel())));
        }
        self.wait_for_device(&x);
        Ok(Ok(x.double_value(&[]) as f32))
    }
    fn constant(&mut self, like: Resource<PluginTensor>, values: Vec<f32>, shape: Vec<i64>) -> OpResult {
        let n = shape.iter().try_fold(1i64, |acc, &d| if d < 0 { None } else { acc.checked_mul(d) });
        if n != Some(values.len() as i64) {
            return Ok(Err(format!("constant: {} values do not fill shape {shape:?}", values.len())));
        }
        if values.len() > self.instance_limits.max_read_elements {
            return Ok(Err(format!(
                "constant: {} values, more than this deploy's cap of {}",
                values.len(),
                self.instance_limits.max_read_elements
            )));
        }
        let device = self.get(&like)?.device();
        self.op("constant", |_| Tensor::from_slice(&values).f_reshape(shape.as_slice())?.f_to_device(device))
    }
}

fn to_tch(e: wasmtime::Error) -> tch::TchError {
    tch::TchError::Kind(e.to_string())
}

impl tensor_read::Host for HostState {
    fn read_f32(&mut self, x: Resource<PluginTensor>) -> wasmtime::Result<Result<Vec<f32>, String>> {
        let cap = self.instance_limits.max_read_elements;
        let x = self.get(&x)?.shallow_clone();
        let n = x.numel();
        if n > cap {
            return Ok(Err(format!("read-f32: {n} elements exceed the deploy's cap of {cap}")));
        }
        self.wait_for_device(&x);
        let flat = x.to_kind(Kind::Float).to_device(tch::Device::Cpu).flatten(0, -1);
        let mut out = vec![0f32; n];
        flat.copy_data(&mut out, n);
        Ok(Ok(out))
    }
}

impl log::Host for HostState {
    fn log(&mut self, level: log::Level, message: String) -> wasmtime::Result<()> {
        let lim = self.instance_limits;
        if self.counts.log_lines >= lim.max_log_lines {
            if self.counts.dropped_log_lines == 0 {
                tracing::warn!(plugin = %self.plugin, "log limit of {} lines reached; dropping further lines", lim.max_log_lines);
            }
            self.counts.dropped_log_lines += 1;
            return Ok(());
        }
        self.counts.log_lines += 1;
        let message = cut(message, lim.max_message_bytes);
        let p = &self.plugin;
        match level {
            log::Level::Trace => tracing::trace!(plugin = %p, "{message}"),
            log::Level::Debug => tracing::debug!(plugin = %p, "{message}"),
            log::Level::Info => tracing::info!(plugin = %p, "{message}"),
            log::Level::Warn => tracing::warn!(plugin = %p, "{message}"),
            log::Level::Error => tracing::error!(plugin = %p, "{message}"),
        }
        Ok(())
    }
}

impl events::Host for HostState {
    fn emit(&mut self, name: String, payload_json: String) -> wasmtime::Result<()> {
        let lim = self.instance_limits;
        if self.counts.events >= lim.max_events {
            self.counts.dropped_events += 1;
            return Ok(());
        }
        self.counts.events += 1;
        let (name, payload_json) = (cut(name, 256), cut(payload_json, lim.max_message_bytes));
        self.events.push(PluginEvent { plugin: self.plugin.to_string(), name, payload_json });
        Ok(())
    }
}
