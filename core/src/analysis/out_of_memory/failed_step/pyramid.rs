//! A first forward's whole need for a model built as a pyramid of stages (a CNN, a U-Net's
//! encoder): each stage halves the spatial size and doubles the channels, so one block's
//! activations are C × H × W ∝ 1 / C of the first stage's while its weights grow as C².
//!
//! - **The stages, from the weights' sizes**: the largest weight size that repeats, and the
//!   sizes four times it, sixteen times it, … that repeat too (C² per stage: a ConvNeXt's 4C²
//!   pointwise linears, a ResNet's 9C² convolutions) are the stages' weights, holding at least a
//!   third of the parameters. A stage's blocks are the count of its weight, divided by how many
//!   of it one block holds where the stage's weights that grow as C (twice per stage: a
//!   depthwise convolution's, C × k²) say so (the greatest common divisor of the two counts,
//!   the same share in every stage), else one.
//! - **One block's activations, from the forward**: the forward's allocations repeat with the
//!   blocks (each block runs the same lines): the last full period of that repetition before the
//!   failure is one block; the live bytes it made (not a parameter's size, not a cache) are what
//!   it keeps for backward. Blocks of the same lines earlier in the forward are blocks of the
//!   stages before.
//! - **The rest**: the failing block's remainder, the stage's blocks to come, and each later
//!   stage's blocks at C_now / C_k of one block (C_k / C_now = √(its weight / this stage's)).
//!   Downsampling layers between stages and the head are not counted (a few % of a stage).
//!
//! A model whose repeated weights are all of one size (a ViT, a transformer) is no pyramid:
//! [`Pyramid::of`] says `None`.

use rustc_hash::FxHashMap;

/// One stage of the pyramid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stage {
    /// Its blocks' largest repeated weight size, bytes.
    pub weight: i64,
    /// How many blocks it holds.
    pub blocks: usize,
}

/// The stages read from the parameters' sizes, widest weights last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pyramid {
    pub stages: Vec<Stage>,
    /// How many of the stage weight one block holds (1 where the sizes do not say).
    pub per_block: usize,
}

/// Whether `b` is `k` × `a` within 1 % (sizes rounded by the allocator in old snapshots).
fn times(a: i64, b: i64, k: i64) -> bool {
    (b - k * a).abs() * 100 <= k * a
}

/// The chain `first`, `k` × `first`, `k²` × `first`, … of sizes present in `counts`.
fn chain(counts: &[(i64, usize)], first: i64, k: i64, min_count: usize) -> Vec<(i64, usize)> {
    let mut out = vec![];
    let mut want = first;
    while let Some(&(s, n)) = counts.iter().find(|(s, n)| *n >= min_count && times(want, *s, 1)) {
        out.push((s, n));
        want = s * k;
    }
    out
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl Pyramid {
    /// The pyramid the parameters' sizes show, if they show one (see the module's list).
    pub fn of(parameter_sizes: &[i64]) -> Option<Pyramid> {
        let mut by_size: FxHashMap<i64, usize> = FxHashMap::default();
        for &s in parameter_sizes.iter().filter(|s| **s > 0) {
            *by_size.entry(s).or_default() += 1;
        }
        let mut counts: Vec<(i64, usize)> = by_size.into_iter().collect();
        counts.sort_unstable();
        let total: i64 = parameter_sizes.iter().sum();
        // The C² chain of repeated sizes holding the most bytes.
        let weights = counts
            .iter()
            .filter(|(_, n)| *n >= 2)
            .map(|&(s, _)| chain(&counts, s, 4, 2))
            .filter(|c| c.len() >= 2)
            .max_by_key(|c| c.iter().map(|(s, n)| s * *n as i64).sum::<i64>())?;
        let held: i64 = weights.iter().map(|(s, n)| s * *n as i64).sum();
        if held * 3 < total {
            return None;
        }
        let per_block = Self::per_block(&counts, &weights)?;
        Some(Pyramid {
            stages: weights
                .iter()
                .map(|&(weight, n)| Stage {
                    weight,
                    blocks: n / per_block,
                })
                .collect(),
            per_block,
        })
    }

    /// How many of the stage weight one block holds: from the largest chain of sizes doubling
    /// stage by stage beneath the stages' weights (a depthwise convolution's, C × k²; a norm's,
    /// C) whose counts share the same divisor with theirs in every stage; else 1. `None` where
    /// no size doubles from stage to stage: the channels do not double (a ViT's h² and 4h²
    /// are a ratio of four, but its vectors are all h wide), so this is no pyramid.
    fn per_block(counts: &[(i64, usize)], weights: &[(i64, usize)]) -> Option<usize> {
        let first = weights[0].0;
        let doubling: Vec<Vec<(i64, usize)>> = counts
            .iter()
            .rev()
            .filter(|(s, _)| *s < first)
            .map(|&(s, _)| chain(counts, s, 2, 1))
            .filter(|c| c.len() >= weights.len())
            .collect();
        if doubling.is_empty() {
            return None;
        }
        let shared = doubling.iter().find_map(|c| {
            let shares: Vec<usize> = weights.iter().zip(c).map(|(&(_, n), &(_, m))| n / gcd(n, m)).collect();
            shares.iter().all(|&k| k == shares[0]).then_some(shares[0])
        });
        Some(shared.unwrap_or(1))
    }

    /// Blocks in the stages before stage `k`.
    fn blocks_before(&self, k: usize) -> usize {
        self.stages[..k].iter().map(|s| s.blocks).sum()
    }
}

/// The forward's allocations in order: each one's stack and the bytes it still holds at the
/// failure (0: freed, a cache, or a parameter's size).
#[derive(Debug, Clone, Copy)]
pub struct Made {
    pub stack: u32,
    pub live_bytes: i64,
}

/// Where the failing forward stood in the pyramid.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reached {
    /// The stage it failed in (0-based).
    pub stage: usize,
    /// The block of that stage it failed in (1-based).
    pub block: usize,
    /// What one block of that stage keeps.
    pub block_bytes: i64,
    /// What the forward still needs beyond what it made so far and the failing request.
    pub to_come: f64,
}

/// The smallest period the tail of `stacks` repeats with, and how far back the repetition
/// runs (the longest such run wins, the smallest period on a tie).
fn tail_period(stacks: &[u32]) -> Option<(usize, usize)> {
    let n = stacks.len();
    let mut best: Option<(usize, usize)> = None; // (period, matched)
    for p in 1..n {
        let matched = (p..n).rev().take_while(|&i| stacks[i] == stacks[i - p]).count();
        if matched > 0 && best.is_none_or(|(_, m)| matched > m) {
            best = Some((p, matched));
        }
    }
    best.map(|(p, matched)| (p, matched + p))
}

/// Reads how far the forward got (`made`: its allocations, `requested`: the failing one) and
/// what the rest of it needs, if its allocations repeat with the blocks.
pub fn reached(pyramid: &Pyramid, made: &[Made], requested: i64) -> Option<Reached> {
    let stacks: Vec<u32> = made.iter().map(|m| m.stack).collect();
    let (p, run) = tail_period(&stacks)?;
    // Blocks have more than one allocation: a period of one is a single layer repeating.
    if p < 2 {
        return None;
    }
    let n = made.len();
    let start = n - run;
    let full = run / p;
    let block_bytes: i64 = made[start + (full - 1) * p..start + full * p]
        .iter()
        .map(|m| m.live_bytes)
        .sum();
    let so_far: i64 = made[start + full * p..].iter().map(|m| m.live_bytes).sum::<i64>() + requested;
    // Earlier blocks of the same lines: the stages before (their first allocation's stack, as
    // often as it comes in one block).
    let first = stacks[start];
    let per_period = stacks[start..start + p].iter().filter(|&&s| s == first).count();
    let earlier = stacks[..start].iter().filter(|&&s| s == first).count() / per_period;
    let begun = earlier + full + 1;
    let stage = (0..pyramid.stages.len()).find(|&k| begun <= pyramid.blocks_before(k + 1))?;
    let after_this = pyramid.blocks_before(stage + 1) - begun;
    let here = pyramid.stages[stage].weight as f64;
    let later: f64 = pyramid.stages[stage + 1..]
        .iter()
        .map(|s| s.blocks as f64 * block_bytes as f64 * (here / s.weight as f64).sqrt())
        .sum();
    Some(Reached {
        stage,
        block: begun - pyramid.blocks_before(stage),
        block_bytes,
        to_come: (block_bytes - so_far).max(0) as f64 + after_this as f64 * block_bytes as f64 + later,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// convnext_tiny's parameter sizes (fp32): stages of 96, 192, 384, 768 channels, 3, 3, 9, 3
    /// blocks; each block a 7×7 depthwise conv (49C), two pointwise linears (4C²), vectors.
    fn convnext_tiny() -> Vec<i64> {
        let mut sizes = vec![96 * 3 * 16 * 4, 1000 * 768 * 4];
        for (c, blocks) in [(96i64, 3), (192, 3), (384, 9), (768, 3)] {
            for _ in 0..blocks {
                sizes.extend([
                    49 * c * 4,
                    c * 4,
                    c * 4,
                    c * 4,
                    4 * c * c * 4,
                    16 * c,
                    4 * c * c * 4,
                    c * 4,
                    c * 4,
                ]);
            }
            if c < 768 {
                sizes.extend([c * 4, c * 4, 2 * c * c * 4 * 4, 2 * c * 4]);
            }
        }
        sizes
    }

    #[test]
    fn convnext_stages_and_blocks_are_read_from_its_sizes() {
        let p = Pyramid::of(&convnext_tiny()).expect("a pyramid");
        assert_eq!(p.per_block, 2);
        let blocks: Vec<usize> = p.stages.iter().map(|s| s.blocks).collect();
        assert_eq!(blocks, vec![3, 3, 9, 3]);
        assert_eq!(p.stages[0].weight, 4 * 96 * 96 * 4);
    }

    /// ResNet-50's parameter sizes (fp32): bottleneck stages of 64, 128, 256, 512 channels,
    /// 3, 4, 6, 3 blocks; the 3×3 convolution (9C²) once a block.
    #[test]
    fn resnet50_stages_and_blocks_are_read_from_its_sizes() {
        let mut sizes = vec![64 * 3 * 49 * 4, 64 * 4, 64 * 4, 2048 * 1000 * 4, 1000 * 4];
        let mut inputs = 64i64;
        for (c, blocks) in [(64i64, 3), (128, 4), (256, 6), (512, 3)] {
            for b in 0..blocks {
                sizes.extend([inputs * c * 4, c * 4, c * 4, 9 * c * c * 4, c * 4, c * 4, 4 * c * c * 4]);
                sizes.extend([4 * c * 4, 4 * c * 4]);
                if b == 0 {
                    sizes.extend([inputs * 4 * c * 4, 4 * c * 4, 4 * c * 4]);
                }
                inputs = 4 * c;
            }
        }
        let p = Pyramid::of(&sizes).expect("a pyramid");
        let blocks: Vec<usize> = p.stages.iter().map(|s| s.blocks).collect();
        assert_eq!((p.per_block, blocks), (1, vec![3, 4, 6, 3]));
    }

    #[test]
    fn repeated_blocks_of_one_width_are_no_pyramid() {
        // A ViT-B: 12 blocks of 768 wide, qkv 3h², proj h², MLP 4h² twice.
        let h = 768i64;
        let mut sizes = vec![];
        for _ in 0..12 {
            sizes.extend([3 * h * h * 4, h * h * 4, 4 * h * h * 4, 4 * h * h * 4, h * 4, h * 4]);
        }
        // h² and 4h² are a ratio of four and hold most of the weights, but no size doubles.
        assert_eq!(Pyramid::of(&sizes), None);
    }

    #[test]
    fn the_forward_is_extrapolated_over_the_stages_to_come() {
        let p = Pyramid::of(&convnext_tiny()).expect("a pyramid");
        // A stem (stacks 1, 2), then block 1 of stage 0 (stacks 10..15, 100 bytes each),
        // then block 2 begun (10, 11) and failing at its third allocation.
        let mut made: Vec<Made> = [1, 2]
            .iter()
            .map(|&s| Made {
                stack: s,
                live_bytes: 50,
            })
            .collect();
        for s in 10..16 {
            made.push(Made {
                stack: s,
                live_bytes: 100,
            });
        }
        made.extend([10, 11].map(|s| Made {
            stack: s,
            live_bytes: 100,
        }));
        let r = reached(&p, &made, 100).expect("reached");
        assert_eq!((r.stage, r.block, r.block_bytes), (0, 2, 600));
        // 300 of block 2, block 3 whole, then 3 × 300 + 9 × 150 + 3 × 75.
        let want = 300.0 + 600.0 + 3.0 * 300.0 + 9.0 * 150.0 + 3.0 * 75.0;
        assert!((r.to_come - want).abs() < 1e-6, "{}", r.to_come);
    }
}
