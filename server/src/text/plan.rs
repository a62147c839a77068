//! A plan as text: the bundled models, a training step's plan and a serving plan, each its
//! verdict first.

use memlens_api::{Plan, ServingPlan};

use super::gib;

/// The bundled models as text: one a line, the name `--model` takes, the family, the parameters.
pub fn render_models(models: &[memlens_api::PlanModel]) -> String {
    let mut s = String::new();
    for m in models {
        s += &format!(
            "{:<42} {:<12} {:>8.2} B parameters   (also: {})\n",
            m.id,
            m.model_type,
            m.parameter_count as f64 / 1e9,
            m.aliases.join(", ")
        );
    }
    s
}

/// The plan as text: the verdict first, then the budget, then what it assumes.
pub fn render_plan(p: &Plan) -> String {
    let mut s = format!("{}\n", p.verdict());
    if let Some(b) = p.max_batch_size {
        s += &format!("  largest batch at {} tokens: {b}\n", p.seq_len);
    }
    if let Some(l) = p.max_seq_len {
        s += &format!("  longest sequence at batch {}: {l} tokens\n", p.batch_size);
    }
    s += &format!(
        "  {:?} model, {} parameters ({} trainable); batch {} × {} tokens; peak at {}\n",
        p.model_family,
        p.parameter_count,
        p.trainable_parameter_count,
        p.batch_size,
        p.seq_len,
        p.peak_phase.label()
    );
    for c in &p.by_category {
        s += &format!("    {:<16} {}\n", c.category.name(), gib(c.bytes));
    }
    for a in &p.alternatives {
        s += &format!(
            "  {} {}: {} reserved\n",
            if a.fits { "fits with" } else { "still over with" },
            a.label,
            gib(a.predicted_peak_reserved_bytes)
        );
    }
    for a in &p.assumptions {
        s += &format!("  assumes: {a}\n");
    }
    s
}

/// The serving plan as text: whether one request of max_model_len fits, the longest and the
/// most that do, then the startup as a log's summary shows it, then what it assumes.
pub fn render_serving_plan(p: &ServingPlan) -> String {
    let v = &p.serving;
    let len = v.max_model_len.unwrap_or(0);
    let mut s = format!(
        "{} max_model_len {len}: {}\n",
        if p.fits_max_model_len { "fits" } else { "does not fit" },
        v.verdict
    );
    s += &format!("  longest max_model_len that fits: {}\n", p.largest_max_model_len);
    s += &format!("  requests of {len} tokens at once: {}\n", p.largest_concurrency);
    let lines = [
        ("total", v.total_gpu_memory_bytes),
        ("weights", v.weights_bytes),
        ("activation peak", v.activation_peak_bytes),
        ("non-torch", v.non_torch_bytes),
        ("CUDA graphs", v.cuda_graph_bytes),
        ("KV cache", v.kv_cache_bytes),
    ];
    for (name, bytes) in lines {
        if let Some(b) = bytes {
            s += &format!("    {name:<16} {}\n", gib(b));
        }
    }
    if let Some(f) = &v.failure {
        for r in &f.remedies {
            s += &format!("  remedy: {}\n", r.note);
        }
    }
    for a in &v.notes {
        s += &format!("  assumes: {a}\n");
    }
    s
}
