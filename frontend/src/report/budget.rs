//! What the peak is made of: one bar split by category (bytes live at the peak), and per
//! category its bytes at the peak, its own maximum and the rules that placed its allocations.

use leptos::prelude::*;
use memlens_api::{Category, DeviceSummary};

use crate::display::bytes;

/// A fixed colour per category (red stays for leaks and OOMs).
pub fn colour(c: Category) -> &'static str {
    match c {
        Category::Parameter => "#4c72b0",
        Category::Gradient => "#55a868",
        Category::OptimizerState => "#8172b2",
        Category::Activation => "#dd8452",
        Category::Temporary => "#ccb974",
        Category::Input => "#64b5cd",
        Category::Cache => "#937860",
        Category::Other => "#a0a4ab",
    }
}

fn rule_name(r: memlens_api::CategoryRule) -> String {
    format!("{r:?}")
        .chars()
        .flat_map(|c| {
            if c.is_ascii_uppercase() {
                vec![' ', c.to_ascii_lowercase()]
            } else {
                vec![c]
            }
        })
        .collect::<String>()
        .trim()
        .to_owned()
}

pub fn budget(s: &DeviceSummary) -> Option<impl IntoView> {
    let total: i64 = s.categories.iter().map(|c| c.bytes_at_peak).sum();
    (!s.categories.is_empty() && total > 0).then(|| {
        let segments = s
            .categories
            .iter()
            .filter(|c| c.bytes_at_peak > 0)
            .map(|c| {
                let pct = c.bytes_at_peak as f64 * 100.0 / total as f64;
                view! {
                    <div class="budget-part" style:width=format!("{pct:.2}%") style:background=colour(c.category)
                        title=format!("{}: {}", c.category.name(), bytes(c.bytes_at_peak))></div>
                }
            })
            .collect_view();
        let rows = s
            .categories
            .iter()
            .map(|c| {
                let rules = c
                    .rules
                    .iter()
                    .map(|r| format!("{} ({})", rule_name(r.rule), r.count))
                    .collect::<Vec<_>>()
                    .join(", ");
                view! {
                    <li>
                        <span class="swatch" style:background=colour(c.category)></span>
                        <b>{c.category.name()}</b>
                        {format!(" — {} at the peak, at most {}, {} allocation(s); by {rules}", bytes(c.bytes_at_peak), bytes(c.max_bytes), c.count)}
                    </li>
                }
            })
            .collect_view();
        let pools = (s.pools.len() > 1).then(|| {
            let items = s
                .pools
                .iter()
                .map(|p| {
                    let kind = match p.kind {
                        memlens_api::PoolKind::Default => "default pool",
                        memlens_api::PoolKind::MemPool => "MemPool",
                        memlens_api::PoolKind::GraphPool => "CUDA graph pool",
                    };
                    let name = p.name.as_deref().map_or(String::new(), |n| format!(" “{n}”"));
                    let drawn = if p.reserved_series.is_empty() { "" } else { " — drawn on the timeline" };
                    format!(
                        "{kind}{name} ({}, {}): reserved at most {}, {} at the end in {} segment(s){drawn}",
                        p.pool_id[0],
                        p.pool_id[1],
                        bytes(p.peak_reserved_bytes),
                        bytes(p.final_reserved_bytes),
                        p.segments_at_end
                    )
                })
                .map(|t| view! { <li>{t}</li> })
                .collect_view();
            view! { <h2>"Memory pools"</h2><ul class="groups" id="pools">{items}</ul> }
        });
        let kv_cache = s.kv_cache.as_ref().map(|kv| {
            view! { <p id="kv-cache" title=kv.how.clone()><b>"Key/value cache: "</b>{kv.describe()}</p> }
        });
        view! {
            <section class="panel" id="budget">
                <h2>"What the peak is made of"</h2>
                <div class="budget-bar">{segments}</div>
                <ul class="groups budget">{rows}</ul>
                {kv_cache}
                {pools}
            </section>
        }
    })
}
