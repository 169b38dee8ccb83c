//! `Linear`: fused projections keep each module's rows and slot, and the residual add riding
//! the GEMM equals a forward and an add.

use std::collections::HashMap;
use std::path::PathBuf;

use fastvideo_layers::Linear;
use fastvideo_torch::weights::Weights;
use tch::{Device, Kind, Tensor};

fn weights() -> Weights {
    tch::manual_seed(3);
    let t = |s: &[i64]| Tensor::randn(s, (Kind::Float, Device::Cpu));
    let tensors = HashMap::from([
        ("q.weight".to_string(), t(&[6, 4])),
        ("q.bias".to_string(), t(&[6])),
        ("k.weight".to_string(), t(&[2, 4])),
        ("k.bias".to_string(), t(&[2])),
    ]);
    Weights::from_tensors(tensors, PathBuf::from("test"), Device::Cpu, Kind::Float)
}

#[test]
fn concat_keeps_each_module_rows_and_slot() {
    let w = weights();
    let (q, k) = (Linear::new(&w.pp("q"), 4, 6, true).unwrap(), Linear::new(&w.pp("k"), 4, 2, true).unwrap());
    let x = Tensor::randn([3, 4], (Kind::Float, Device::Cpu));
    let want = Tensor::cat(&[q.forward(&x), k.forward(&x)], 1);
    let qk = Linear::concat(vec![q, k]);
    // One GEMM instead of two: the same products, summed in another blocking.
    assert!(qk.forward(&x).allclose(&want, 1e-6, 1e-6, false));
    let parts: Vec<_> = qk.parts().iter().map(|p| (p.slot, p.start, p.len)).collect();
    assert_eq!(parts, [(0, 0, 6), (1, 6, 2)]);
    let names: Vec<_> = w.linears().into_iter().map(|m| m.name).collect();
    assert_eq!(names, ["q", "k"], "registered in build order");
}

#[test]
fn forward_add_equals_forward_plus_the_residual() {
    let w = weights();
    let q = Linear::new(&w.pp("q"), 4, 6, true).unwrap();
    let x = Tensor::randn([2, 3, 4], (Kind::Float, Device::Cpu));
    let residual = Tensor::randn([2, 3, 6], (Kind::Float, Device::Cpu));
    let want = &residual + q.forward(&x);
    q.forward_add(&residual, &x);
    let err = (&residual - &want).abs().max().double_value(&[]);
    assert!(err < 1e-6, "max |fused - unfused| = {err}");
    // A strided accumulator takes the unfused path.
    let acc = Tensor::zeros([6, 3, 2], (Kind::Float, Device::Cpu)).permute([2, 1, 0]);
    q.forward_add(&acc, &x);
    assert!(acc.allclose(&q.forward(&x), 1e-6, 1e-6, false));
}
