//! The compare page's tables: the peak difference by category and by stack, and each
//! iteration's peak of both sides with their steady state by category.

use leptos::prelude::*;
use memlens_api::{Category, Comparison, Side};

use super::signed;
use crate::display::bytes;
use crate::report::colour;

pub fn by_category(c: &Comparison) -> impl IntoView {
    let most = c
        .by_category
        .iter()
        .map(|d| d.delta_bytes.abs())
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let rows = c
        .by_category
        .iter()
        .map(|d| {
            let w = 50.0 * d.delta_bytes.abs() as f64 / most;
            let (left, cls) = if d.delta_bytes >= 0 { (50.0, "up") } else { (50.0 - w, "down") };
            view! {
                <tr data-category=d.category.name()>
                    <td><span class="swatch" style:background=colour(d.category)></span>{d.category.name()}</td>
                    <td class="num">{bytes(d.bytes_a)}</td>
                    <td class="num">{bytes(d.bytes_b)}</td>
                    <td class="num delta-cell">{signed(d.delta_bytes)}</td>
                    <td class="diverging"><div class=format!("dbar {cls}") style:left=format!("{left:.2}%") style:width=format!("{w:.2}%")></div></td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <section class="panel" id="compare-categories">
            <h2>"The difference by category"</h2>
            <p class="muted">"Bytes of each category live at each side's own peak."</p>
            <table class="compare-table">
                <thead><tr><th>"category"</th><th>"A"</th><th>"B"</th><th>"A − B"</th><th></th></tr></thead>
                <tbody>{rows}</tbody>
            </table>
        </section>
    }
}

pub fn by_stack(c: &Comparison) -> impl IntoView {
    let rows = c
        .by_stack
        .iter()
        .map(|d| {
            let only = match d.only_in {
                Some(Side::A) => "only in A",
                Some(Side::B) => "only in B",
                None => "",
            };
            let full = d.stack.join("\n");
            view! {
                <tr>
                    <td class="num delta-cell">{signed(d.delta_bytes)}</td>
                    <td class="num">{format!("{} / {}", d.count_a, d.count_b)}</td>
                    <td class="stack-cell" title=full><code>{d.stack_line().unwrap_or_else(|| "(no stack: allocated before recording, or on a thread without Python frames)".to_owned())}</code>" "<span class="tag">{only}</span></td>
                </tr>
            }
        })
        .collect_view();
    let rest = (c.by_stack_rest_delta_bytes != 0).then(|| {
        view! { <p class="muted">{format!("Other stacks together: {}.", signed(c.by_stack_rest_delta_bytes))}</p> }
    });
    view! {
        <section class="panel" id="compare-stacks">
            <h2>"The difference by stack"</h2>
            <p class="muted">"Live at each side's peak, matched on user frames (never addresses); hover a row for its whole stack."</p>
            <table class="compare-table">
                <thead><tr><th>"A − B"</th><th>"allocations A / B"</th><th>"stack"</th></tr></thead>
                <tbody>{rows}</tbody>
            </table>
            {rest}
        </section>
    }
}

/// Up to this many steps are listed one by one.
const LISTED_STEPS: usize = 12;

fn sorted(v: &[i64]) -> Vec<i64> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v
}

pub fn iterations(c: &Comparison) -> Option<impl IntoView> {
    let n = c.a.iteration_peaks.len().max(c.b.iteration_peaks.len());
    let cats: Vec<Category> = Category::ALL
        .into_iter()
        .filter(|k| {
            c.a.steady_by_category
                .iter()
                .chain(&c.b.steady_by_category)
                .any(|s| s.category == *k && s.steady_bytes.is_some_and(|b| b > 0))
        })
        .collect();
    (n > 0 || !cats.is_empty()).then(|| {
        let cell = |v: Option<i64>| v.map_or("—".to_owned(), bytes);
        let row = |name: String, a: Option<i64>, b: Option<i64>| {
            let d = a.zip(b).map_or("—".to_owned(), |(a, b)| signed(a - b));
            view! { <tr><td>{name}</td><td class="num">{cell(a)}</td><td class="num">{cell(b)}</td><td class="num">{d}</td></tr> }
        };
        // A long run's steps are summarised (the chart above draws each one).
        let iter_rows = if n <= LISTED_STEPS {
            (0..n)
                .map(|i| row(format!("iteration {i}"), c.a.iteration_peaks.get(i).copied(), c.b.iteration_peaks.get(i).copied()))
                .collect_view()
                .into_any()
        } else {
            let (a, b) = (sorted(&c.a.iteration_peaks), sorted(&c.b.iteration_peaks));
            let at = |v: &[i64], q: usize| (!v.is_empty()).then(|| v[(v.len() - 1) * q / 2]);
            [("lowest", 0), ("median", 1), ("highest", 2)]
                .into_iter()
                .map(|(name, q)| row(format!("{name} of {n} iteration peaks"), at(&a, q), at(&b, q)))
                .collect_view()
                .into_any()
        };
        let steady = |side: &memlens_api::ComparedRun, k: Category| {
            side.steady_by_category.iter().find(|s| s.category == k).and_then(|s| s.steady_bytes)
        };
        let cat_rows = cats
            .iter()
            .map(|&k| {
                let (a, b) = (steady(&c.a, k), steady(&c.b, k));
                let d = a.zip(b).map_or("—".to_owned(), |(a, b)| signed(a - b));
                view! { <tr><td><span class="swatch" style:background=colour(k)></span>{format!("{} (steady)", k.name())}</td><td class="num">{cell(a)}</td><td class="num">{cell(b)}</td><td class="num">{d}</td></tr> }
            })
            .collect_view();
        view! {
            <section class="panel" id="compare-iterations">
                <h2>"Iteration by iteration"</h2>
                <p class="muted">"Each iteration's allocated peak, then each category's steady state (its most bytes within one iteration, median over the iterations)."</p>
                <table class="compare-table">
                    <thead><tr><th></th><th>"A"</th><th>"B"</th><th>"A − B"</th></tr></thead>
                    <tbody>{iter_rows}{cat_rows}</tbody>
                </table>
            </section>
        }
    })
}
