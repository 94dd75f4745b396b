//! XS subs of Lugh::Graph: computes Lugh::Ops results.
use super::tensor::tensor_arg;
use crate::engine::ggml::cpu_budget::{physical_cores, MAX_THREADS};
use crate::engine::tensor::graph::TensorGraph;
use crate::engine::Error;
use crate::glue::{new_object, object_arc, set, Args, Given, Opt, Ret};
use crate::xs_subs;
use std::sync::Arc;

pub const CLASS: &str = "Lugh::Graph";

fn this(args: &Args) -> Result<Arc<TensorGraph>, Error> {
    object_arc::<TensorGraph>(args.perl(), args.get(0), CLASS)
}

/// The options of compute: threads (default: the physical cores) and the
/// backend (default cpu).
struct ComputeArgs {
    n_threads: Option<i64>,
    backend: String,
}

const COMPUTE_OPTIONS: &[Opt<ComputeArgs>] = &[
    Opt::new("n_threads", |perl, sv, o: &mut ComputeArgs| {
        set(&mut o.n_threads, perl.int_arg(sv, "n_threads").map(Some))
    }),
    Opt::new("backend", |perl, sv, o| set(&mut o.backend, perl.string_arg(sv, "backend"))),
];

xs_subs! { "Lugh::Graph";
    fn _new(args) as "Lugh::Graph->new" {
        args.expect(1, 1, "class")?;
        let perl = args.perl();
        let class = perl.class_arg(args.get(0))?;
        Ok(Ret::One(new_object(perl, &class, Arc::new(TensorGraph::new()))))
    }

    fn build_forward(args) as "Lugh::Graph->build_forward" {
        args.expect(2, 2, "self, tensor")?;
        let g = this(args)?;
        let t = tensor_arg(args.perl(), args.get(1), "the tensor")?;
        g.build_forward(t);
        Ok(Ret::Empty)
    }

    fn n_nodes(args) as "Lugh::Graph->n_nodes" {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().int(this(args)?.n_nodes() as i64)))
    }

    // self, then name => value options (COMPUTE_OPTIONS)
    fn _compute(args) as "Lugh::Graph->compute" {
        let g = this(args)?;
        let perl = args.perl();
        let mut o = ComputeArgs { n_threads: None, backend: "cpu".into() };
        Given::read_into(perl, &args.rest(1), COMPUTE_OPTIONS, &mut o)?;
        let n_threads = o.n_threads.unwrap_or(physical_cores() as i64);
        if !(1..=MAX_THREADS as i64).contains(&n_threads) {
            return Err(Error::Argument(format!("n_threads must be 1 to {MAX_THREADS}, got {n_threads}")).into());
        }
        g.compute(n_threads as usize, &o.backend)?;
        Ok(Ret::Empty)
    }
}
