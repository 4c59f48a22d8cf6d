//! Profiling aid: times the parts of an Ethereum import unit on era1 files (read and hash
//! only, read and check, the whole unit, its index entries).
//! `cargo run --profile ci --example eth_import_profile -- ERA1_DIR [NETWORK] [FILES]`

use rechain_native::eth::chain_config::ChainConfig;
use rechain_native::eth::era1::Era1;
use rechain_native::eth::import::{self, Options, Source};
use rechain_native::eth::tables::Rows;
use rechain_native::eth::validate::{verify_era1, verify_era1_into};
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().expect("era1 folder"));
    let network = args.next().unwrap_or_else(|| "dev".into());
    let files: usize = args.next().map_or(20, |s| s.parse().unwrap());
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "era1"))
        .collect();
    paths.sort();
    paths.truncate(files);
    let cfg = ChainConfig::by_name(&network).expect("a network");
    let opts = Options {
        cfg,
        pow: false,
        from: 0,
        to: u64::MAX,
        pow_threads: 1,
        list: import::historical_roots(&network),
    };
    // PROFILE_ONLY=<part name> runs that part alone (for a profiler).
    let only = std::env::var("PROFILE_ONLY").ok();
    // The least of a few passes: this machine's neighbours make single timings noisy.
    let passes: usize = std::env::var("PROFILE_PASSES").map_or(3, |s| s.parse().unwrap());
    let per_file = |name: &str, f: &dyn Fn(&std::path::Path)| {
        if only.as_deref().is_some_and(|o| o != name) {
            return;
        }
        let best = (0..passes)
            .map(|_| {
                let t = Instant::now();
                for p in &paths {
                    f(p);
                }
                t.elapsed().as_secs_f64()
            })
            .fold(f64::MAX, f64::min);
        let ms = best * 1e3 / paths.len() as f64;
        println!("{name:<28} {ms:7.2} ms a file");
    };
    per_file("read the file", &|p| {
        std::fs::read(p).unwrap();
    });
    per_file("open", &|p| {
        Era1::open(p).unwrap();
    });
    per_file("read and hash headers", &|p| {
        import::era1_header_hashes(p).unwrap();
    });
    per_file("read and check", &|p| {
        let era = Era1::open(p).unwrap();
        assert!(verify_era1(&era, &cfg, None, None).violations.is_empty());
    });
    let rows_of = |p: &std::path::Path| {
        let era = Era1::open(p).unwrap();
        let mut rows = Rows::with_capacity("x", 8192);
        verify_era1_into(&era, &cfg, None, None, &mut |b, _| {
            rows.push(
                b.header,
                b.body,
                b.body_payload_len,
                b.receipts,
                b.td,
                b.offset,
            )
        });
        rows
    };
    per_file("check, rows pushed", &|p| {
        rows_of(p);
    });
    per_file("check, rows finished", &|p| {
        rows_of(p).finish(&[]).unwrap();
    });
    per_file("whole unit", &|p| {
        import::run(&Source::Era1(p.to_path_buf()), &opts).unwrap();
    });
    let units: Vec<_> = paths
        .iter()
        .map(|p| import::run(&Source::Era1(p.clone()), &opts).unwrap())
        .collect();
    let t = Instant::now();
    for u in &units {
        import::index_entries(&u.batches[0]).unwrap();
    }
    println!(
        "{:<28} {:7.2} ms a file",
        "index entries",
        t.elapsed().as_secs_f64() * 1e3 / units.len() as f64
    );
}
