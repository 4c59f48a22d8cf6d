//! Independent jobs run on at most a given number of threads: the callers' thread counts are
//! the CPUs their task was given (`--workers`, a Ray task's `num_cpus`), not the jobs they have.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Runs `job(0..jobs)` on at most `threads` threads, each taking the next job not yet taken
/// (so put the longest first), and returns the results in job order. With one thread the
/// jobs run in turn on the calling thread. A panicking job panics the caller.
pub fn map_bounded<R: Send>(
    jobs: usize,
    threads: usize,
    job: impl Fn(usize) -> R + Sync,
) -> Vec<R> {
    let threads = threads.clamp(1, jobs.max(1));
    if threads == 1 {
        return (0..jobs).map(job).collect();
    }
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<Option<R>>> = Mutex::new((0..jobs).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= jobs {
                    return;
                }
                let r = job(i);
                done.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
            });
        }
    });
    done.into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .map(|r| r.expect("every job ran"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::map_bounded;
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    #[test]
    fn results_in_job_order_whatever_the_threads() {
        for threads in [0, 1, 2, 3, 7, 50] {
            let got = map_bounded(20, threads, |i| i * i);
            assert_eq!(
                got,
                (0..20).map(|i| i * i).collect::<Vec<_>>(),
                "{threads} threads"
            );
        }
        assert!(map_bounded(0, 4, |i| i).is_empty());
    }

    #[test]
    fn never_more_threads_than_asked() {
        for threads in [1, 2, 3] {
            let running = AtomicUsize::new(0);
            let most = AtomicUsize::new(0);
            let ids = Mutex::new(HashSet::new());
            map_bounded(12, threads, |_| {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                ids.lock().unwrap().insert(std::thread::current().id());
                std::thread::sleep(std::time::Duration::from_millis(5));
                running.fetch_sub(1, Ordering::SeqCst);
            });
            assert!(most.load(Ordering::SeqCst) <= threads);
            assert!(ids.lock().unwrap().len() <= threads);
            if threads == 1 {
                let caller = std::thread::current().id();
                assert_eq!(*ids.lock().unwrap(), HashSet::from([caller]));
            }
        }
    }
}
