//! A global allocator that counts the bytes the current thread allocates inside
//! [`allocated_by`], and the allocations it makes inside [`allocations_by`] (other tests of the binary run on other threads meanwhile). Included with
//! `#[path = "common/counting_alloc.rs"] mod counting_alloc;` by the test binaries that
//! measure allocations; it becomes that binary's global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;
thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATED: Cell<usize> = const { Cell::new(0) };
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn count(n: usize) {
    if COUNTING.with(Cell::get) {
        ALLOCATED.with(|a| a.set(a.get() + n));
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
    }
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count(l.size());
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count(n);
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` and returns its result with the bytes this thread allocated meanwhile.
#[allow(dead_code)]
pub fn allocated_by<R>(f: impl FnOnce() -> R) -> (R, usize) {
    counted(f).0
}

/// Runs `f` and returns its result with the number of allocations (and reallocations) this
/// thread made meanwhile.
#[allow(dead_code)]
pub fn allocations_by<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let ((r, _), n) = counted(f);
    (r, n)
}

fn counted<R>(f: impl FnOnce() -> R) -> ((R, usize), usize) {
    ALLOCATED.with(|a| a.set(0));
    ALLOCATIONS.with(|a| a.set(0));
    COUNTING.with(|c| c.set(true));
    let r = f();
    COUNTING.with(|c| c.set(false));
    ((r, ALLOCATED.with(Cell::get)), ALLOCATIONS.with(Cell::get))
}
