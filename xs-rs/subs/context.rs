//! XS subs of Lugh::Context: a ggml context with its own memory arena.
use crate::engine::tensor::TensorContext;
use crate::engine::Error;
use crate::glue::{new_object, object_arc, Args, Ret};
use crate::xs_subs;
use std::sync::Arc;

pub const CLASS: &str = "Lugh::Context";

fn this(args: &Args) -> Result<Arc<TensorContext>, Error> {
    object_arc::<TensorContext>(args.perl(), args.get(0), CLASS)
}

xs_subs! { "Lugh::Context";
    fn _new(args) as "Lugh::Context->new" {
        args.expect(2, 2, "class, mem_size")?;
        let perl = args.perl();
        let class = perl.class_arg(args.get(0))?;
        let mem_size = perl.int_arg(args.get(1), "mem_size")?;
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
