//! The two sorts Valkey orders results with, reproduced so that ties come out in the order
//! Valkey gives them: a geo search's matches at equal distances, and SORT ... BY ... LIMIT's
//! elements with equal weights.
//!
//! Valkey sorts all matches with the C library's `qsort` (glibc: a top-down merge sort, hence
//! stable) and, when COUNT keeps fewer than it found, only the first COUNT positions with its
//! partial quicksort `pqsort` (Bentley and McIlroy's three-way partitioning, "Engineering a
//! Sort Function", recursing only into partitions that overlap the wanted positions). Ties
//! are common (members added at the same place), and both sorts leave them in their own
//! orders; a library sort would leave them in a third. Both take a three-way comparison and
//! never panic when it is inconsistent (a NaN distance).

use std::cmp::Ordering;

/// Sorts `v` as glibc's `qsort` does: merge sort, the left half before the right on ties.
pub(super) fn merge_sort<T: Clone>(v: &mut [T], cmp: &impl Fn(&T, &T) -> Ordering) {
    if v.len() <= 1 {
        return;
    }
    let mut tmp = Vec::with_capacity(v.len());
    merge_rec(v, &mut tmp, cmp);
}

fn merge_rec<T: Clone>(v: &mut [T], tmp: &mut Vec<T>, cmp: &impl Fn(&T, &T) -> Ordering) {
    let n = v.len();
    if n <= 1 {
        return;
    }
    let n1 = n / 2;
    merge_rec(&mut v[..n1], tmp, cmp);
    merge_rec(&mut v[n1..], tmp, cmp);
    tmp.clear();
    let (mut i, mut j) = (0, n1);
    while i < n1 && j < n {
        if cmp(&v[i], &v[j]) != Ordering::Greater {
            tmp.push(v[i].clone());
            i += 1;
        } else {
            tmp.push(v[j].clone());
            j += 1;
        }
    }
    // What is left of the right half is already in place.
    tmp.extend(v[i..n1].iter().cloned());
    v[..tmp.len()].clone_from_slice(tmp);
}

/// Orders `v` so that positions `lo..=hi` hold what a full sort would put there, moving
/// elements exactly as Valkey's `pqsort` does.
pub(super) fn partial_sort<T>(v: &mut [T], lo: usize, hi: usize, cmp: &impl Fn(&T, &T) -> Ordering) {
    pqsort(v, 0, v.len(), lo, hi, cmp);
}

/// [`partial_sort`] of the `n` elements from `base`; `lo` and `hi` are positions in all of `v`.
fn pqsort<T>(v: &mut [T], mut base: usize, mut n: usize, lo: usize, hi: usize, cmp: &impl Fn(&T, &T) -> Ordering) {
    loop {
        if n < 7 {
            for m in base + 1..base + n {
                let mut l = m;
                while l > base && cmp(&v[l - 1], &v[l]) == Ordering::Greater {
                    v.swap(l, l - 1);
                    l -= 1;
                }
            }
            return;
        }
        let mut pm = base + n / 2;
        if n > 7 {
            let mut pl = base;
            let mut pn = base + n - 1;
            if n > 40 {
                let d = n / 8;
                pl = median3(v, pl, pl + d, pl + 2 * d, cmp);
                pm = median3(v, pm - d, pm, pm + d, cmp);
                pn = median3(v, pn - 2 * d, pn - d, pn, cmp);
            }
            pm = median3(v, pl, pm, pn, cmp);
        }
        // The pivot goes first; elements equal to it gather at both ends, then move to the
        // middle.
        v.swap(base, pm);
        let (mut pa, mut pb) = (base + 1, base + 1);
        let (mut pc, mut pd) = (base + n - 1, base + n - 1);
        loop {
            while pb <= pc {
                let r = cmp(&v[pb], &v[base]);
                if r == Ordering::Greater {
                    break;
                }
                if r == Ordering::Equal {
                    v.swap(pa, pb);
                    pa += 1;
                }
                pb += 1;
            }
            while pb <= pc {
                let r = cmp(&v[pc], &v[base]);
                if r == Ordering::Less {
                    break;
                }
                if r == Ordering::Equal {
                    v.swap(pc, pd);
                    pd -= 1;
                }
                pc -= 1;
            }
            if pb > pc {
                break;
            }
            v.swap(pb, pc);
            pb += 1;
            pc -= 1;
        }
        let end = base + n;
        let r = (pa - base).min(pb - pa);
        swap_runs(v, base, pb - r, r);
        let r = (pd - pc).min(end - pd - 1);
        swap_runs(v, pb, end - r, r);
        let wanted = |first: usize, count: usize| {
            !((lo < first && hi < first) || (lo > first + count - 1 && hi > first + count - 1))
        };
        // The smaller elements, then the larger ones (a loop rather than recursion).
        let below = pb - pa;
        if below > 1 && wanted(base, below) {
            pqsort(v, base, below, lo, hi, cmp);
        }
        let above = pd - pc;
        if above <= 1 {
            return;
        }
        base = end - above;
        n = above;
        if !wanted(base, n) {
            return;
        }
    }
}

/// The index of the median of three (`med3`).
fn median3<T>(v: &[T], a: usize, b: usize, c: usize, cmp: &impl Fn(&T, &T) -> Ordering) -> usize {
    if cmp(&v[a], &v[b]) == Ordering::Less {
        if cmp(&v[b], &v[c]) == Ordering::Less {
            b
        } else if cmp(&v[a], &v[c]) == Ordering::Less {
            c
        } else {
            a
        }
    } else if cmp(&v[b], &v[c]) == Ordering::Greater {
        b
    } else if cmp(&v[a], &v[c]) == Ordering::Less {
        a
    } else {
        c
    }
}

/// Swaps `n` elements from `a` with `n` elements from `b`, pairwise in order (`vecswap`).
fn swap_runs<T>(v: &mut [T], a: usize, b: usize, n: usize) {
    for k in 0..n {
        v.swap(a + k, b + k);
    }
}
