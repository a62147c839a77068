//! `GET /api/plan` and the `/plan` page: the same plan as `memlens plan`, from a config and from
//! a report of a run of the same model (calibrated), and clear refusals.

use super::*;

fn config_text(name: &str) -> String {
    std::fs::read_to_string(trace(&format!("plan/configs/{name}.json"))).expect("config")
}

fn cli_plan(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_memlens"))
        .arg("plan")
        .args(args)
        .arg("--json")
        .output()
        .expect("cli");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("json")
}

fn plan_query(pairs: &[(&str, &str)]) -> String {
    format!("/api/plan?{}", serde_urlencoded::to_string(pairs).expect("query"))
}

#[test]
fn the_plan_answers_like_the_cli_from_a_config_and_calibrated_by_a_report() {
    let (s, id) = server_with_report("plan", &[], "plan/runs/llama_b2.pickle.gz");
    let config = config_text("llama_train");
    let model = trace("plan/configs/llama_train.json");
    let model = model.to_str().expect("path");
    // From the config alone.
    let (code, v) = get_json(
        &s,
        &plan_query(&[
            ("config", &config),
            ("batch_size", "8"),
            ("seq_len", "1024"),
            ("gpu_memory_bytes", "25769803776"),
        ]),
    );
    assert_eq!(code, 200, "{v}");
    let cli = cli_plan(&[
        "--model",
        model,
        "--batch-size",
        "8",
        "--seq-len",
        "1024",
        "--gpu-memory",
        "24GiB",
    ]);
    for k in [
        "predicted_peak_allocated_bytes",
        "predicted_peak_reserved_bytes",
        "parameter_count",
        "max_batch_size",
        "max_seq_len",
        "fits",
    ] {
        assert_eq!(v[k], cli[k], "{k}: {v}");
    }
    assert_eq!(v["parameter_count"], 155_730_944);
    assert_eq!(v["model_family"], "llama");
    // Calibrated by the report of the batch-2 run: at batch 2 it is that run's peak.
    let (code, own) = get_json(
        &s,
        &plan_query(&[
            ("config", &config),
            ("calibrate", &id),
            ("run_batch_size", "2"),
            ("run_seq_len", "1024"),
            ("batch_size", "2"),
            ("seq_len", "1024"),
        ]),
    );
    assert_eq!(code, 200, "{own}");
    assert_eq!(
        own["predicted_peak_allocated_bytes"],
        oracle_value_of("plan/runs/llama_b2.pickle.gz")
    );
    assert!(
        own["calibrated_from"].as_str().is_some_and(|c| c.contains(&id)),
        "{own}"
    );
    let (_, at8) = get_json(
        &s,
        &plan_query(&[
            ("config", &config),
            ("calibrate", &id),
            ("run_batch_size", "2"),
            ("run_seq_len", "1024"),
            ("batch_size", "8"),
            ("seq_len", "1024"),
        ]),
    );
    let run = trace("plan/runs/llama_b2.pickle.gz");
    let cli = cli_plan(&[
        "--model",
        model,
        "--batch-size",
        "8",
        "--seq-len",
        "1024",
        "--calibrate",
        run.to_str().expect("path"),
        "--run-batch-size",
        "2",
    ]);
    assert_eq!(
        at8["predicted_peak_allocated_bytes"], cli["predicted_peak_allocated_bytes"],
        "{at8}"
    );
    // Refusals name what is wrong.
    let (code, e) = get_json(&s, &plan_query(&[("config", &config), ("batch_sise", "8")]));
    assert_eq!(code, 400, "{e}");
    assert!(e["error"].as_str().is_some_and(|m| m.contains("batch_sise")), "{e}");
    let (code, e) = get_json(
        &s,
        &plan_query(&[("config", r#"{"model_type":"llama","hidden_size":64}"#)]),
    );
    assert_eq!(code, 400, "{e}");
    assert!(
        e["error"].as_str().is_some_and(|m| m.contains("num_attention_heads")),
        "{e}"
    );
    let (code, e) = get_json(&s, &plan_query(&[("config", &config), ("calibrate", &id)]));
    assert_eq!(code, 400, "{e}");
    assert!(e["error"].as_str().is_some_and(|m| m.contains("run_batch_size")), "{e}");
    let (code, _) = get_json(
        &s,
        &plan_query(&[
            ("calibrate", "nosuchreport"),
            ("run_batch_size", "2"),
            ("run_seq_len", "8"),
        ]),
    );
    assert_eq!(code, 404);
    // The page itself.
    let page = ureq::get(&s.url("/plan?batch_size=4"))
        .call()
        .expect("page")
        .into_string()
        .expect("html");
    assert!(page.contains("memlens plan"), "{}", &page[..page.len().min(300)]);
}

#[test]
fn the_cli_refuses_a_config_it_cannot_count_naming_the_field() {
    let dir = tmpdir("plan-cli");
    let cfg = dir.join("config.json");
    std::fs::write(
        &cfg,
        r#"{"model_type": "mamba", "d_model": 768, "n_layer": 24, "vocab_size": 50280}"#,
    )
    .expect("write");
    assert_cli_refuses(
        Command::new(env!("CARGO_BIN_EXE_memlens"))
            .args(["plan", "--model"])
            .arg(&cfg),
        "hidden_size",
    );
    assert_cli_refuses(
        Command::new(env!("CARGO_BIN_EXE_memlens")).args(["plan", "--model", "/no/such/config.json"]),
        "/no/such/config.json",
    );
    // A model's folder: its config.json is read (the same plan as from the file).
    let folder = dir.join("llama");
    std::fs::create_dir_all(&folder).expect("folder");
    std::fs::copy(trace("plan/configs/llama_train.json"), folder.join("config.json")).expect("copy");
    let file = trace("plan/configs/llama_train.json");
    assert_eq!(
        cli_plan(&[
            "--model",
            folder.to_str().expect("path"),
            "--batch-size",
            "4",
            "--seq-len",
            "1024"
        ]),
        cli_plan(&[
            "--model",
            file.to_str().expect("path"),
            "--batch-size",
            "4",
            "--seq-len",
            "1024"
        ]),
    );
    assert_cli_refuses(
        Command::new(env!("CARGO_BIN_EXE_memlens"))
            .args(["plan", "--model"])
            .arg(&*dir),
        "config.json",
    );
    assert_cli_refuses(
        Command::new(env!("CARGO_BIN_EXE_memlens")).args(["plan", "--params", "1000", "--gpu-memory", "5%"]),
        "--gpu-memory",
    );
}

#[test]
fn a_bundled_model_by_name_plans_offline_alike_in_the_cli_and_the_api() {
    let s = Server::serve_in(tmpdir("plan-presets"), &[]);
    let args = ["--batch-size", "2", "--seq-len", "1024", "--gpu-memory", "80GiB"];
    let by_id = cli_plan(&[&["--model", "meta-llama/Llama-3.1-8B"][..], &args[..]].concat());
    let by_alias = cli_plan(&[&["--model", "LLAMA-3.1-8B"][..], &args[..]].concat());
    assert_eq!(by_id, by_alias);
    assert_eq!(by_id["parameter_count"], 8_030_261_248u64);
    let (code, v) = get_json(
        &s,
        &plan_query(&[
            ("model", "meta-llama/Llama-3.1-8B"),
            ("batch_size", "2"),
            ("seq_len", "1024"),
            ("gpu_memory_bytes", "85899345920"),
        ]),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v, by_id);
    // An unknown name is refused, naming the close ones; a missing file is a missing file.
    let (code, v) = get_json(&s, &plan_query(&[("model", "llama-3.1-9b")]));
    assert_eq!(code, 400, "{v}");
    assert!(v.to_string().contains("meta-llama/Llama-3.1-8B"), "{v}");
    assert_cli_refuses(
        Command::new(env!("CARGO_BIN_EXE_memlens")).args(["plan", "--model", "./no/such/config.json"]),
        "no/such/config.json",
    );
    // The list the page's picker and `--list-models` show.
    let (code, models) = get_json(&s, "/api/plan/models");
    assert_eq!(code, 200);
    let models = models.as_array().expect("models");
    assert!(models.len() >= 40, "{}", models.len());
    let listed = Command::new(env!("CARGO_BIN_EXE_memlens"))
        .args(["plan", "--list-models"])
        .output()
        .expect("cli");
    let text = String::from_utf8_lossy(&listed.stdout);
    for m in models {
        assert!(text.contains(m["id"].as_str().expect("id")), "{m}");
    }
}

#[test]
fn accumulation_trained_layers_and_lora_answer_alike_from_the_cli_and_the_api() {
    let (s, _) = server_with_report("plan-round2", &[], "plan/runs/llama_b2.pickle.gz");
    let config = config_text("llama_train");
    let model = trace("plan/configs/llama_train.json");
    let model = model.to_str().expect("path");
    const ALL: &str = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj";
    /// The same settings as the API's query and as the CLI's flags.
    struct Case {
        query: &'static [(&'static str, &'static str)],
        flags: &'static [&'static str],
    }
    let cases = [
        Case {
            query: &[
                ("grad_accum_steps", "4"),
                ("train", "model.layers.6.*,model.layers.7.*"),
            ],
            flags: &[
                "--grad-accum-steps",
                "4",
                "--train",
                "model.layers.6.*",
                "--train",
                "model.layers.7.*",
            ],
        },
        Case {
            query: &[
                ("lora_rank", "16"),
                ("lora_targets", ALL),
                ("weights", "nf4"),
                ("autocast", "none"),
            ],
            flags: &[
                "--lora-rank",
                "16",
                "--lora-targets",
                ALL,
                "--weights",
                "nf4",
                "--autocast",
                "none",
            ],
        },
        Case {
            query: &[("lora_rank", "8"), ("lora_dropout", "0")],
            flags: &["--lora-rank", "8", "--lora-dropout", "0"],
        },
    ];
    for Case { query, flags } in cases {
        let mut pairs = vec![("config", config.as_str()), ("batch_size", "4"), ("seq_len", "1024")];
        pairs.extend_from_slice(query);
        let (code, v) = get_json(&s, &plan_query(&pairs));
        assert_eq!(code, 200, "{v}");
        let mut args = vec!["--model", model, "--batch-size", "4", "--seq-len", "1024"];
        args.extend_from_slice(flags);
        let cli = cli_plan(&args);
        for k in [
            "predicted_peak_allocated_bytes",
            "parameter_count",
            "trainable_parameter_count",
        ] {
            assert_eq!(v[k], cli[k], "{k}: {query:?}");
        }
    }
    // A glob that names nothing is refused, naming the names it should look like.
    let (code, e) = get_json(&s, &plan_query(&[("config", &config), ("train", "layers.6.*")]));
    assert_eq!(code, 400, "{e}");
    assert!(
        e["error"].as_str().is_some_and(|m| m.contains("model.layers.0.")),
        "{e}"
    );
}

#[test]
fn a_serving_plan_answers_alike_from_the_cli_and_the_api_and_calibrates_by_a_logs_report() {
    const LOG: &str = "serving-logs/vllm-0.6.4-llama-3.1-8b-3090-max-seq-len.log";
    let (s, id) = server_with_report("plan-serve", &[], LOG);
    let flags = [
        "--serve",
        "--model",
        "meta-llama/Llama-3.1-8B",
        "--gpu-memory",
        "23.58GiB",
        "--gpu-memory-utilization",
        "0.9",
        "--max-model-len",
        "29000",
        "--engine-version",
        "0.6.4",
    ];
    let cli = cli_plan(&flags);
    let gpu = ((23.58 * (1u64 << 30) as f64).round() as i64).to_string();
    let query = [
        ("serve", "true"),
        ("model", "meta-llama/Llama-3.1-8B"),
        ("gpu_memory_bytes", gpu.as_str()),
        ("gpu_memory_utilization", "0.9"),
        ("max_model_len", "29000"),
        ("engine_version", "0.6.4"),
    ];
    let (code, v) = get_json(&s, &plan_query(&query));
    assert_eq!(code, 200, "{v}");
    for k in ["fits_max_model_len", "largest_max_model_len", "largest_concurrency"] {
        assert_eq!(v[k], cli[k], "{k}: {v}");
    }
    assert_eq!(v["serving"]["kv_cache_bytes"], cli["serving"]["kv_cache_bytes"]);
    assert_eq!(v["serving"]["failure"]["cause"], "max_model_len_over_kv_cache");
    // Calibrated by the log: as a path to the CLI, as its report to the API, at a shorter length.
    let path = trace(LOG);
    let calibrated = cli_plan(&[
        "--serve",
        "--model",
        "meta-llama/Llama-3.1-8B",
        "--engine-version",
        "0.6.4",
        "--max-model-len",
        "16384",
        "--calibrate",
        path.to_str().expect("path"),
    ]);
    let (code, v) = get_json(
        &s,
        &plan_query(&[
            ("serve", "true"),
            ("model", "meta-llama/Llama-3.1-8B"),
            ("engine_version", "0.6.4"),
            ("max_model_len", "16384"),
            ("calibrate", &id),
        ]),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["serving"]["kv_cache_bytes"], calibrated["serving"]["kv_cache_bytes"]);
    assert_eq!(v["fits_max_model_len"], true);
    assert!(v["calibrated_from"].as_str().is_some_and(|c| c.contains(&id)), "{v}");
    // Without the GPU's memory there is no plan, and the refusal says what is missing.
    let (code, v) = get_json(&s, &plan_query(&[("serve", "true"), ("model", "qwen3-8b")]));
    assert_eq!(code, 400, "{v}");
    assert!(v.to_string().contains("GPU's memory"), "{v}");
}
