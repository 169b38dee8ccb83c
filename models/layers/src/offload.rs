//! A model's linears moved between the device and host memory without rebuilding the model:
//! the linears (all but a sliver of a transformer's parameters) are read as groups, in the order
//! a forward reads them, copied, and their tensors repointed at other storage in place, so every
//! handle the model holds sees the move. What a family walks (which linears, in which groups)
//! stays in the family; expert offloading and `sleep`/`wake` are built on these.

use anyhow::Result;
use fastvideo_kernels::transfer::Transfer;
use tch::{Device, Tensor};

use crate::linear::Linear;

/// Tensors for each linear's (weight, bias), by group (the layout of the `&Linear` groups they
/// were taken from).
pub type Groups = Vec<Vec<(Tensor, Option<Tensor>)>>;

/// A host buffer like `t`: pinned where the device is CUDA (fast, asynchronous copies).
fn host_like(t: &Tensor, device: Device) -> Tensor {
    let h = Tensor::empty(t.size(), (t.kind(), Device::Cpu));
    match device {
        Device::Cuda(_) => h.f_pin_memory(device).unwrap_or(h),
        _ => h,
    }
}

/// Points `t`'s storage at `data` (every handle of `t` sees it).
pub(crate) fn repoint(t: &Tensor, data: &Tensor) {
    let mut t = t.shallow_clone();
    t.set_data(data);
}

/// `f` of every linear's weight and bias, in the groups' layout.
pub fn map_linears(groups: &[Vec<&Linear>], f: impl Fn(&Tensor) -> Tensor) -> Groups {
    let one = |l: &&Linear| (f(&l.weight), l.bias.as_ref().map(&f));
    groups.iter().map(|g| g.iter().map(one).collect()).collect()
}

/// `f` of every tensor of `groups`, in the same layout.
pub fn map_linears_of(groups: &Groups, f: impl Fn(&Tensor) -> Tensor) -> Groups {
    groups.iter().map(|g| g.iter().map(|(w, b)| (f(w), b.as_ref().map(&f))).collect()).collect()
}

/// Host copies of the linears, pinned when `device` is CUDA.
pub fn host_copy(groups: &[Vec<&Linear>], device: Device) -> Groups {
    map_linears(groups, |w| {
        let mut h = host_like(w, device);
        h.copy_(w);
        h
    })
}

/// Points the linears at `data` (laid out as `groups`).
pub fn point(groups: &[Vec<&Linear>], data: &Groups) {
    for (g, d) in groups.iter().zip(data) {
        for (l, (w, b)) in g.iter().zip(d) {
            repoint(&l.weight, w);
            if let (Some(lb), Some(b)) = (&l.bias, b) {
                repoint(lb, b);
            }
        }
    }
}

/// Whether two sets of tensors pair up one to one with equal shapes and dtypes.
pub fn same_layout(a: &Groups, b: &Groups) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(g, h)| same_group(g, h))
}

/// [`same_layout`] for one group.
pub(crate) fn same_group(g: &[(Tensor, Option<Tensor>)], h: &[(Tensor, Option<Tensor>)]) -> bool {
    let same = |x: &Tensor, y: &Tensor| x.size() == y.size() && x.kind() == y.kind();
    g.len() == h.len()
        && g.iter().zip(h).all(|((w, b), (v, c))| {
            same(w, v)
                && match (b, c) {
                    (Some(b), Some(c)) => same(b, c),
                    (None, None) => true,
                    _ => false,
                }
        })
}

/// Copies one group's host tensors `src` into its device tensors `dst` now (the CPU, or no copy
/// stream).
pub fn copy_group(dst: &[(Tensor, Option<Tensor>)], src: &[(Tensor, Option<Tensor>)]) {
    for ((w, b), (hw, hb)) in dst.iter().zip(src) {
        w.shallow_clone().copy_(hw);
        if let (Some(b), Some(hb)) = (b, hb) {
            b.shallow_clone().copy_(hb);
        }
    }
}

/// Queues one group's copies from `src` (pinned host) into `dst` on `t`'s copy stream; the
/// caller orders them after compute and marks their arrival.
pub fn upload_group(t: &Transfer, dst: &[(Tensor, Option<Tensor>)], src: &[(Tensor, Option<Tensor>)]) -> Result<()> {
    for ((w, b), (hw, hb)) in dst.iter().zip(src) {
        t.upload(w, hw)?;
        if let (Some(b), Some(hb)) = (b, hb) {
            t.upload(b, hb)?;
        }
    }
    Ok(())
}
