//! XS subs of the package Lugh: backends and versions.
use crate::engine::ggml::cpu_budget::available_cpus;
use crate::engine::{ggml::backend, ggml::cpu, rng, Error};
use crate::glue::Ret;
use crate::xs_subs;

xs_subs! { "Lugh";
    fn ggml_version(args) {
        args.expect(0, 0, "")?;
        Ok(Ret::One(args.perl().str(env!("LUGH_GGML_VERSION"))))
    }

    fn _live_objects(args) {
        args.expect(0, 0, "")?;
        let live = crate::glue::LIVE_OBJECTS.load(std::sync::atomic::Ordering::Relaxed);
        Ok(Ret::One(args.perl().int(live as i64)))
    }

    fn _live_engine(args) {
        args.expect(0, 0, "")?;
        Ok(Ret::One(args.perl().int(crate::engine::live::count() as i64)))
    }

    fn _allocations(args) {
        args.expect(0, 0, "")?;
        let n = crate::engine::alloc_count::allocations();
        Ok(Ret::One(args.perl().uint(n)))
    }

    fn supported_architectures(args) {
        args.expect(0, 0, "")?;
        let perl = args.perl();
        Ok(Ret::List(crate::engine::model::arch::ARCHITECTURES.iter().map(|a| perl.str(a.name)).collect()))
    }

    // The backends with a device; Lugh.pm's available_backends adds 'auto'.
    fn _available_backends(args) as "Lugh::available_backends" {
        args.expect(0, 0, "")?;
        let perl = args.perl();
        Ok(Ret::List(backend::available().iter().map(|b| perl.str(&b.name)).collect()))
    }

    fn backend_available(args) {
        args.expect(1, 1, "name")?;
        let perl = args.perl();
        let name = perl.string_arg(args.get(0), "backend name")?;
        // 'auto' always resolves (to best_backend); 1 or 0, as Lugh 0.12 returned
        let available = name.eq_ignore_ascii_case("auto") || backend::find(&name).is_some();
        Ok(Ret::One(perl.int(available as i64)))
    }

    fn _registered_backends(args) {
        args.expect(0, 0, "")?;
        let perl = args.perl();
        Ok(Ret::List(backend::registered().iter().map(|name| perl.str(name)).collect()))
    }

    fn best_backend(args) {
        args.expect(0, 0, "")?;
        let perl = args.perl();
        Ok(Ret::One(backend::best().map_or(perl.undef(), |b| perl.str(&b.name))))
    }

    fn _backend_info(args) {
        args.expect(1, 1, "name")?;
        let perl = args.perl();
        let name = perl.string_arg(args.get(0), "backend name")?;
        let Some(b) = backend::find(&name) else { return Ok(Ret::Empty) };
        Ok(Ret::List(vec![
            perl.str("name"), perl.str(&b.name),
            perl.str("type"), perl.str(b.kind),
            perl.str("is_gpu"), perl.int(b.is_gpu as i64),
            perl.str("device_count"), perl.int(b.device_count as i64),
            perl.str("description"), perl.str(&b.description),
            perl.str("memory_free"), perl.uint(b.memory_free as u64),
            perl.str("memory_total"), perl.uint(b.memory_total as u64),
            // [name, description, free, total] each; Lugh.pm makes them hashes
            perl.str("devices"), perl.array_ref(&b.devices.iter().map(|(name, description, free, total)| {
                perl.array_ref(&[perl.str(name), perl.str(description), perl.uint(*free as u64), perl.uint(*total as u64)])
            }).collect::<Vec<_>>()),
        ]))
    }

    fn _rpc_devices(args) {
        args.expect(1, 1, "backend")?;
        let perl = args.perl();
        let backend_name = perl.string_arg(args.get(0), "backend")?;
        let devices = crate::engine::ggml::rpc::server_devices(&backend_name)?;
        Ok(Ret::List(devices.iter().map(|d| perl.str(&format!("{} ({})", d.name(), d.description()))).collect()))
    }

    fn _rpc_server(args) as "Lugh::rpc_server" {
        args.expect(5, 5, "host, port, backend, n_threads, cache_dir")?;
        let perl = args.perl();
        let host = perl.string_arg(args.get(0), "host")?;
        let port = perl.int_arg(args.get(1), "port")?;
        let port = u16::try_from(port).ok().filter(|&p| p > 0)
            .ok_or_else(|| Error::Argument(format!("port must be an integer in 1..65535, got {port}")))?;
        let backend_name = perl.string_arg(args.get(2), "backend")?;
        let n_threads = perl.int_arg(args.get(3), "threads")?;
        if !(1..=crate::engine::ggml::cpu_budget::MAX_THREADS as i64).contains(&n_threads) {
            return Err(Error::Argument(format!("threads must be an integer in 1..512, got {n_threads}")).into());
        }
        let cache = match perl.is_defined(args.get(4)) {
            true => Some(perl.string_arg(args.get(4), "cache")?),
            false => None,
        };
        let devices = crate::engine::ggml::rpc::server_devices(&backend_name)?;
        crate::engine::ggml::rpc::serve(&host, port, &devices, n_threads as usize, cache.as_deref())?;
        Ok(Ret::Empty)
    }

    fn _cpu_features(args) {
        args.expect(0, 0, "")?;
        let perl = args.perl();
        let names = |list: Vec<&str>| perl.array_ref(&list.into_iter().map(|f| perl.str(f)).collect::<Vec<_>>());
        Ok(Ret::List(vec![
            perl.str("variant"), perl.str(cpu::variant()),
            perl.str("build"), perl.str(cpu::build_kind()),
            perl.str("arch"), perl.str(std::env::consts::ARCH),
            perl.str("features"), names(cpu::compiled_features()),
            perl.str("missing"), names(cpu::missing_features()),
            perl.str("n_cpus"), perl.int(available_cpus() as i64),
        ]))
    }

    fn _srand(args) as "Lugh::srand" {
        args.expect(1, 1, "seed")?;
        let perl = args.perl();
        let seed = match perl.is_defined(args.get(0)) {
            true => match perl.int_arg(args.get(0), "seed")? {
                seed if seed >= 0 => seed as u64,
                seed => return Err(Error::Argument(format!("seed must be an integer >= 0, got {seed}")).into()),
            },
            false => rng::entropy_seed() >> 1,
        };
        rng::seed_default_rng(seed);
        Ok(Ret::One(perl.uint(seed)))
    }
}
