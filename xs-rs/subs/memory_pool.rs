//! XS subs of Lugh::MemoryPool (made by Lugh::Inference->create_memory_pool).
use crate::engine::generate::inference::PoolHandle;
use crate::engine::Error;
use crate::glue::{object_arc, Args, Ret};
use crate::xs_subs;
use std::sync::Arc;

fn this(args: &Args) -> Result<Arc<PoolHandle>, Error> {
    object_arc::<PoolHandle>(args.perl(), args.get(0), super::inference::POOL_CLASS)
}

xs_subs! { "Lugh::MemoryPool";
    fn reset(args) {
        args.expect(1, 1, "self")?;
        this(args)?.with(|p| p.reset());
        Ok(Ret::One(args.perl().bool(true)))
    }

    fn backend(args) {
        args.expect(1, 1, "self")?;
        let p = this(args)?;
        let name = p.with(|p| p.backend_name().to_string());
        Ok(Ret::One(args.perl().str(&name)))
    }

    fn n_allocations(args) {
        args.expect(1, 1, "self")?;
        let n = this(args)?.with(|p| p.n_allocations());
        Ok(Ret::One(args.perl().int(n as i64)))
    }
}
