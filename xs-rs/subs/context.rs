//! XS subs of Lugh::Context: a ggml context with its own memory arena.
use crate::engine::tensor::TensorContext;
use crate::engine::Error;
use crate::glue::{new_object, object_arc, set, Args, Given, Opt, Ret};
use crate::xs_subs;
use std::sync::Arc;

pub const CLASS: &str = "Lugh::Context";

fn this(args: &Args) -> Result<Arc<TensorContext>, Error> {
    object_arc::<TensorContext>(args.perl(), args.get(0), CLASS)
}

/// The option of new: the arena's size in bytes (mem_size, Lugh 0.12's
/// size; default 16 MiB).
const NEW_OPTIONS: &[Opt<i64>] =
    &[Opt::new("mem_size", |perl, sv, m| set(m, perl.int_arg(sv, "mem_size"))).with_aliases(&["size"])];

xs_subs! { "Lugh::Context";
    // class, then name => value options (NEW_OPTIONS)
    fn new(args) as "Lugh::Context->new" {
        let perl = args.perl();
        let class = perl.class_arg(args.get(0))?;
        let mut mem_size = 16 * 1024 * 1024;
        Given::read_into(perl, &args.rest(1), NEW_OPTIONS, &mut mem_size)?;
        if mem_size < 0 {
            return Err(Error::Argument(format!("mem_size must be positive (got {mem_size})")).into());
        }
        let ctx = TensorContext::new(mem_size as u64)?;
        Ok(Ret::One(new_object(perl, &class, ctx)))
    }

    fn id(args) as "Lugh::Context->id" {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().uint(this(args)?.id())))
    }

    fn mem_size(args) as "Lugh::Context->mem_size" {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().uint(this(args)?.mem_size() as u64)))
    }

    fn used_mem(args) as "Lugh::Context->used_mem" {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().uint(this(args)?.used_mem() as u64)))
    }
}
