//! The tensor API without perl: contexts, ops, graphs and their errors.
use crate::engine::tensor::graph::TensorGraph;
use crate::engine::tensor::ops::{self as tensor_ops, Binary, Unary};
use crate::engine::tensor::{TensorContext, TensorHandle, Values};
use std::sync::Arc;

const F32: i64 = 0;
const I32: i64 = 26;

fn vector(ctx: &Arc<TensorContext>, values: &[f64]) -> Arc<TensorHandle> {
    let t = TensorHandle::new(ctx, F32, &[values.len() as i64]).unwrap();
    t.set_values(values).unwrap();
    t
}

fn compute(t: &Arc<TensorHandle>) -> Vec<f32> {
    let g = TensorGraph::new();
    g.build_forward(t.clone());
    g.compute(1, "cpu").unwrap();
    match t.values().unwrap() {
        Values::F32(v) => v,
        other => panic!("not f32: {other:?}"),
    }
}

#[test]
fn binary_ops_tile_either_operand() {
    let ctx = TensorContext::new(1 << 20).unwrap();
    let long = vector(&ctx, &[1.0, 2.0, 3.0, 4.0]);
    let short = vector(&ctx, &[10.0, 20.0]);
    let sum = tensor_ops::binary(&ctx, Binary::Add, &long, &short).unwrap();
    assert_eq!(compute(&sum), [11.0, 22.0, 13.0, 24.0]);
    let diff = tensor_ops::binary(&ctx, Binary::Sub, &short, &long).unwrap();
    assert_eq!(compute(&diff), [9.0, 18.0, 7.0, 16.0]);
    let odd = vector(&ctx, &[1.0, 2.0, 3.0]);
    let e = tensor_ops::binary(&ctx, Binary::Mul, &long, &odd).err().unwrap().to_string();
    assert!(e.contains("[4]") && e.contains("[3]"), "{e}");
}

#[test]
fn results_need_a_compute_and_keep_their_contexts() {
    let inputs = TensorContext::new(1 << 16).unwrap();
    let a = vector(&inputs, &[1.0, 4.0, 9.0]);
    drop(inputs); // a keeps its context alive
    let out_ctx = TensorContext::new(1 << 16).unwrap();
    let root = tensor_ops::unary(&out_ctx, Unary::Sqrt, &a).unwrap();
    drop(a);
    assert!(!root.has_data());
    assert!(root.values().err().unwrap().to_string().contains("not been computed"));
    assert_eq!(compute(&root), [1.0, 2.0, 3.0]);
}

#[test]
fn memory_limit_is_an_error_not_an_abort() {
    let ctx = TensorContext::new(4096).unwrap();
    let e = TensorHandle::new(&ctx, F32, &[2048]).err().unwrap().to_string();
    assert!(e.contains("out of memory") && e.contains("8192"), "{e}");
    let small = TensorHandle::new(&ctx, F32, &[16]).unwrap();
    let e = tensor_ops::binary(&ctx, Binary::Add, &small, &small);
    assert!(e.is_ok() || e.err().unwrap().to_string().contains("out of memory"));
}

#[test]
fn get_rows_ids_are_checked_when_the_graph_runs() {
    let ctx = TensorContext::new(1 << 16).unwrap();
    let table = TensorHandle::new(&ctx, F32, &[2, 3]).unwrap();
    table.set_values(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let ids = TensorHandle::new(&ctx, I32, &[2]).unwrap();
    ids.set_values(&[2.0, 0.0]).unwrap();
    let rows = tensor_ops::get_rows(&ctx, &table, &ids).unwrap();
    assert_eq!(compute(&rows), [5.0, 6.0, 1.0, 2.0]);
    ids.set_values(&[1.0, 3.0]).unwrap();
    let g = TensorGraph::new();
    g.build_forward(rows);
    let e = g.compute(1, "cpu").err().unwrap().to_string();
    assert!(e.contains("id 3") && e.contains("3 rows"), "{e}");
    // ids computed inside the graph are checked too
    let scores = TensorHandle::new(&ctx, F32, &[5, 2]).unwrap();
    scores.set_values(&[0.0, 0.0, 0.0, 9.0, 0.0, 9.0, 0.0, 0.0, 0.0, 0.0]).unwrap();
    let best = tensor_ops::argmax(&ctx, &scores).unwrap();
    let picked = tensor_ops::get_rows(&ctx, &table, &best).unwrap();
    let g = TensorGraph::new();
    g.build_forward(picked);
    assert!(g.compute(1, "cpu").err().unwrap().to_string().contains("id 3"));
}

#[test]
fn mul_mat_matches_the_definition() {
    let ctx = TensorContext::new(1 << 20).unwrap();
    let (k, n, m) = (5, 3, 2);
    let a = TensorHandle::new(&ctx, F32, &[k, n]).unwrap();
    let b = TensorHandle::new(&ctx, F32, &[k, m]).unwrap();
    let av: Vec<f64> = (0..k * n).map(|i| (i % 7) as f64 - 3.0).collect();
    let bv: Vec<f64> = (0..k * m).map(|i| (i % 5) as f64 * 0.5).collect();
    a.set_values(&av).unwrap();
    b.set_values(&bv).unwrap();
    let c = tensor_ops::mul_mat(&ctx, &a, &b).unwrap();
    assert_eq!(c.shape(), [n, m]);
    let got = compute(&c);
    for col in 0..m {
        for row in 0..n {
            let want: f64 = (0..k).map(|i| av[(row * k + i) as usize] * bv[(col * k + i) as usize]).sum();
            assert!((f64::from(got[(col * n + row) as usize]) - want).abs() < 1e-5);
        }
    }
    let wrong = TensorHandle::new(&ctx, F32, &[4, 2]).unwrap();
    assert!(tensor_ops::mul_mat(&ctx, &a, &wrong).is_err());
}

#[test]
fn a_graph_without_outputs_or_on_another_backend_is_an_error() {
    let g = TensorGraph::new();
    assert!(g.compute(1, "cpu").is_err());
    let ctx = TensorContext::new(1 << 16).unwrap();
    let a = vector(&ctx, &[1.0]);
    g.build_forward(a);
    assert!(g.compute(1, "no-such-backend").err().unwrap().to_string().contains("no-such-backend"));
}

#[test]
fn gradients_come_from_ggml_backward() {
    use crate::engine::tensor::graph::gradients;
    let ctx = TensorContext::new(1 << 20).unwrap();
    let a = vector(&ctx, &[1.0, 2.0, 3.0]);
    let b = vector(&ctx, &[4.0, 5.0, 6.0]);
    let prod = tensor_ops::binary(&ctx, Binary::Mul, &a, &b).unwrap();
    let act = tensor_ops::unary(&ctx, Unary::Silu, &prod).unwrap();
    let loss = tensor_ops::sum(&ctx, &act).unwrap();
    compute(&loss);
    let grads = gradients(&loss, &[a.clone(), b.clone()], &[]).unwrap();
    let dsilu = |x: f64| {
        let s = 1.0 / (1.0 + (-x).exp());
        s * (1.0 + x * (1.0 - s))
    };
    for i in 0..3 {
        let (x, y) = (i as f64 + 1.0, i as f64 + 4.0);
        assert!((f64::from(grads[0][i]) - y * dsilu(x * y)).abs() < 1e-4, "{grads:?}");
        assert!((f64::from(grads[1][i]) - x * dsilu(x * y)).abs() < 1e-4, "{grads:?}");
    }
    // a loss that is not a scalar, and an op without a backward pass
    assert!(gradients(&act, std::slice::from_ref(&a), &[]).is_err());
    let g = tensor_ops::unary(&ctx, Unary::Gelu, &a).unwrap();
    let l = tensor_ops::sum(&ctx, &g).unwrap();
    compute(&l);
    assert!(gradients(&l, &[a], &[]).err().unwrap().to_string().contains("GELU"));
}
