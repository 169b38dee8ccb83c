//! Ulysses attention over in-process ranks against the one-device attention.

use std::sync::Arc;

use fastvideo_layers::sequence_parallel::{check_degree, split_counts, ulysses_attention, SequenceShard};
use fastvideo_parallel::{local, Communicator};
use tch::{Device, Kind, Tensor};

fn randn(shape: &[i64]) -> Tensor {
    Tensor::randn(shape, (Kind::Float, Device::Cpu))
}

#[test]
fn counts_cover_the_sequence_in_order() {
    assert_eq!(split_counts(10, 4), vec![3, 3, 2, 2]);
    assert_eq!(split_counts(8, 4), vec![2, 2, 2, 2]);
    assert_eq!(split_counts(10, 4).iter().sum::<i64>(), 10);
}

#[test]
fn sharded_attention_equals_the_unsharded_attention() {
    // Wan-like: 12 heads of 16; 50 tokens, which 3, 4 and 6 do not divide.
    tch::manual_seed(2);
    let (heads, tokens) = (12, 50);
    let (q, k, v) = (randn(&[2, tokens, heads * 16]), randn(&[2, tokens, heads * 16]), randn(&[2, tokens, heads * 16]));
    let split = |t: &Tensor| t.view([2, tokens, heads, 16]).transpose(1, 2);
    let want = Tensor::scaled_dot_product_attention(
        &split(&q),
        &split(&k),
        &split(&v),
        None::<Tensor>,
        0.0,
        false,
        None,
        false,
    );
    for degree in [1, 2, 3, 4, 6] {
        let comms: Vec<Arc<dyn Communicator>> =
            local::group(&vec![Device::Cpu; degree]).into_iter().map(|c| Arc::new(c) as _).collect();
        let outs: Vec<Tensor> = std::thread::scope(|s| {
            let handles: Vec<_> = comms
                .iter()
                .map(|c| {
                    let (q, k, v) = (q.shallow_clone(), k.shallow_clone(), v.shallow_clone());
                    s.spawn(move || {
                        let shard = SequenceShard::new(Arc::clone(c), tokens, heads).unwrap();
                        let mine = |t: &Tensor| t.narrow(1, shard.start(), shard.len());
                        ulysses_attention(&mine(&q), &mine(&k), &mine(&v), heads, &shard).unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let got = Tensor::cat(&outs, 2);
        let err = (&got - &want).abs().max().double_value(&[]);
        // Each rank runs the same attention over the same rows: fp32 rounding only.
        assert!(err < 1e-6, "degree {degree}: max |sharded - unsharded| = {err}");
    }
}

#[test]
fn degrees_that_do_not_fit_are_refused_naming_what() {
    let e = check_degree(5, 12, 40).unwrap_err().to_string();
    assert!(e.contains("12 attention heads"), "{e}");
    let e = check_degree(4, 12, 3).unwrap_err().to_string();
    assert!(e.contains("3 tokens"), "{e}");
    assert!(check_degree(0, 12, 48).is_err());
    check_degree(4, 12, 42).unwrap();
}
