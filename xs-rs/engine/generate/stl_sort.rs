//! libstdc++'s `std::sort` and `std::partial_sort` (GCC 12, bits/stl_algo.h
//! and bits/stl_heap.h), step for step: neither is stable, so where
//! llama.cpp's samplers sort elements that compare equal (tied logits,
//! NaN scores), the order they leave is the order these leave, and a draw
//! over the array then picks the same token.
//!
//! `less(a, b)` is the comparator ("a goes before b").

/// Below this many elements, introsort leaves the rest to insertion sort.
const THRESHOLD: usize = 16;

/// `std::sort`: introsort (median-of-three quicksort, heapsort past a depth
/// of 2 log2 n), then insertion sort.
pub fn sort<T: Copy>(v: &mut [T], less: &mut dyn FnMut(&T, &T) -> bool) {
    if v.len() < 2 {
        return;
    }
    let depth = 2 * (usize::BITS - 1 - v.len().leading_zeros()) as usize;
    introsort_loop(v, depth, less);
    final_insertion_sort(v, less);
}

/// `std::partial_sort`: the `middle` first elements of the sorted order, in
/// order, in front (the rest in heap-select order behind them).
pub fn partial_sort<T: Copy>(v: &mut [T], middle: usize, less: &mut dyn FnMut(&T, &T) -> bool) {
    if middle == 0 {
        return;
    }
    heap_select(v, middle, less);
    sort_heap(&mut v[..middle], less);
}

fn introsort_loop<T: Copy>(mut v: &mut [T], mut depth: usize, less: &mut dyn FnMut(&T, &T) -> bool) {
    while v.len() > THRESHOLD {
        if depth == 0 {
            let n = v.len();
            partial_sort(v, n, less);
            return;
        }
        depth -= 1;
        let cut = partition_pivot(v, less);
        let (left, right) = v.split_at_mut(cut);
        introsort_loop(right, depth, less);
        v = left;
    }
}

fn partition_pivot<T: Copy>(v: &mut [T], less: &mut dyn FnMut(&T, &T) -> bool) -> usize {
    let mid = v.len() / 2;
    let last = v.len() - 1;
    move_median_to_first(v, 1, mid, last, less);
    unguarded_partition(v, 1, v.len(), less)
}

/// Puts the median of v[a], v[b], v[c] at v[0].
fn move_median_to_first<T: Copy>(v: &mut [T], a: usize, b: usize, c: usize, less: &mut dyn FnMut(&T, &T) -> bool) {
    let pick = if less(&v[a], &v[b]) {
        if less(&v[b], &v[c]) {
            b
        } else if less(&v[a], &v[c]) {
            c
        } else {
            a
        }
    } else if less(&v[a], &v[c]) {
        a
    } else if less(&v[b], &v[c]) {
        c
    } else {
        b
    };
    v.swap(0, pick);
}

/// Partitions v[first..last] around the pivot v[0]; the cut.
fn unguarded_partition<T: Copy>(
    v: &mut [T],
    mut first: usize,
    mut last: usize,
    less: &mut dyn FnMut(&T, &T) -> bool,
) -> usize {
    loop {
        while less(&v[first], &v[0]) {
            first += 1;
        }
        last -= 1;
        while less(&v[0], &v[last]) {
            last -= 1;
        }
        if first >= last {
            return first;
        }
        v.swap(first, last);
        first += 1;
    }
}

fn final_insertion_sort<T: Copy>(v: &mut [T], less: &mut dyn FnMut(&T, &T) -> bool) {
    if v.len() > THRESHOLD {
        insertion_sort(&mut v[..THRESHOLD], less);
        for i in THRESHOLD..v.len() {
            unguarded_linear_insert(v, i, less);
        }
    } else {
        insertion_sort(v, less);
    }
}

fn insertion_sort<T: Copy>(v: &mut [T], less: &mut dyn FnMut(&T, &T) -> bool) {
    for i in 1..v.len() {
        if less(&v[i], &v[0]) {
            let value = v[i];
            v.copy_within(0..i, 1);
            v[0] = value;
        } else {
            unguarded_linear_insert(v, i, less);
        }
    }
}

fn unguarded_linear_insert<T: Copy>(v: &mut [T], mut last: usize, less: &mut dyn FnMut(&T, &T) -> bool) {
    let value = v[last];
    while less(&value, &v[last - 1]) {
        v[last] = v[last - 1];
        last -= 1;
    }
    v[last] = value;
}

fn heap_select<T: Copy>(v: &mut [T], middle: usize, less: &mut dyn FnMut(&T, &T) -> bool) {
    make_heap(&mut v[..middle], less);
    for i in middle..v.len() {
        if less(&v[i], &v[0]) {
            pop_heap(v, middle, i, less);
        }
    }
}

fn make_heap<T: Copy>(v: &mut [T], less: &mut dyn FnMut(&T, &T) -> bool) {
    let len = v.len();
    if len < 2 {
        return;
    }
    let mut parent = (len - 2) / 2;
    loop {
        let value = v[parent];
        adjust_heap(v, parent, len, value, less);
        if parent == 0 {
            return;
        }
        parent -= 1;
    }
}

fn sort_heap<T: Copy>(v: &mut [T], less: &mut dyn FnMut(&T, &T) -> bool) {
    let mut last = v.len();
    while last > 1 {
        last -= 1;
        pop_heap(v, last, last, less);
    }
}

/// Moves the top of the heap v[..len] to `result` and v[result] into the heap.
fn pop_heap<T: Copy>(v: &mut [T], len: usize, result: usize, less: &mut dyn FnMut(&T, &T) -> bool) {
    let value = v[result];
    v[result] = v[0];
    adjust_heap(v, 0, len, value, less);
}

fn adjust_heap<T: Copy>(v: &mut [T], mut hole: usize, len: usize, value: T, less: &mut dyn FnMut(&T, &T) -> bool) {
    let top = hole;
    let mut child = hole;
    while child < (len - 1) / 2 {
        child = 2 * (child + 1);
        if less(&v[child], &v[child - 1]) {
            child -= 1;
        }
        v[hole] = v[child];
        hole = child;
    }
    if len & 1 == 0 && child == (len - 2) / 2 {
        child = 2 * (child + 1);
        v[hole] = v[child - 1];
        hole = child - 1;
    }
    // push_heap
    let mut parent = hole.wrapping_sub(1) / 2;
    while hole > top && less(&v[parent], &value) {
        v[hole] = v[parent];
        hole = parent;
        parent = hole.wrapping_sub(1) / 2;
    }
    v[hole] = value;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_like_a_sort() {
        let mut seed = 12345u32;
        for n in [0usize, 1, 2, 5, 16, 17, 40, 200, 1000] {
            let v: Vec<u32> = (0..n)
                .map(|_| {
                    seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    (seed >> 16) % 50
                })
                .collect();
            let mut want = v.clone();
            want.sort_unstable();
            let mut got = v.clone();
            sort(&mut got, &mut |a, b| a < b);
            assert_eq!(got, want, "sort {n}");
            for k in [0, n.min(1), n / 3, n] {
                let mut got = v.clone();
                partial_sort(&mut got, k, &mut |a, b| a < b);
                assert_eq!(got[..k], want[..k], "partial_sort {n} {k}");
            }
        }
    }

    #[test]
    fn equal_elements_end_as_libstdcxx_leaves_them() {
        // a comparator that never says "before" (NaN scores): libstdc++'s
        // introsort swaps pairs around the middle pivot; measured with GCC 12
        let mut v: Vec<usize> = (0..20).collect();
        sort(&mut v, &mut |_, _| false);
        assert_eq!(v, [10, 19, 18, 17, 16, 15, 14, 13, 12, 11, 0, 9, 8, 7, 6, 5, 4, 3, 2, 1]);
        // 60 ids by keys 0 to 4 with many ties, and the best 10 of them, as GCC 12's
        // std::sort and std::partial_sort order them
        let mut seed = 7u32;
        let key: Vec<u32> = (0..60)
            .map(|_| {
                seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                (seed >> 16) % 5
            })
            .collect();
        let mut ids: Vec<usize> = (0..60).collect();
        sort(&mut ids, &mut |&a, &b| key[a] < key[b]);
        let want = [
            58, 57, 50, 20, 7, 8, 31, 12, 16, 37, 35, 23, 1, 24, 27, 30, 39, 41, 42, 45, 49, 52, 56, 4, 9, 11, 21, 0,
            55, 13, 38, 14, 15, 28, 34, 59, 2, 54, 5, 48, 19, 43, 40, 33, 32, 36, 18, 29, 10, 47, 46, 6, 17, 51, 26,
            53, 25, 3, 44, 22,
        ];
        assert_eq!(ids, want);
        let mut ids: Vec<usize> = (0..60).collect();
        partial_sort(&mut ids, 10, &mut |&a, &b| key[a] > key[b]);
        assert_eq!(ids[..10], [3, 17, 22, 44, 25, 46, 47, 51, 26, 6]);
    }
}
