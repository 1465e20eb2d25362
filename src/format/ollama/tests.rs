use super::*;

fn manifest(layers: &str) -> Vec<u8> {
    format!(
        "{{\"schemaVersion\":2,\"mediaType\":\"application/vnd.docker.distribution.manifest.v2+json\",\
         \"config\":{{\"mediaType\":\"application/vnd.docker.container.image.v1+json\",\
         \"digest\":\"sha256:{c}\",\"size\":485}},\"layers\":[{layers}]}}\n",
        c = "c".repeat(64)
    )
    .into_bytes()
}

fn layer(kind: &str, hex: char, size: u64) -> String {
    format!(
        "{{\"mediaType\":\"application/vnd.ollama.image.{kind}\",\"digest\":\"sha256:{}\",\"size\":{size}}}",
        hex.to_string().repeat(64)
    )
}

#[test]
fn layers_are_named_by_type_repeated_ones_numbered_in_manifest_order() {
    let layers = [
        layer("model", 'a', 100),
        layer("projector", 'b', 10),
        layer("template", 'd', 5),
        layer("license", 'e', 6),
        layer("license", 'f', 7),
        layer("params", '1', 8),
        layer("tensor", '2', 9),
    ]
    .join(",");
    let l = listing(&manifest(&layers)).unwrap();
    let names: Vec<&str> = l.files.iter().map(|f| &f.name[..]).collect();
    assert_eq!(
        names,
        [
            "model.gguf",
            "projector.gguf",
            "template",
            "license",
            "license-2",
            "params.json"
        ]
    );
    assert_eq!(
        &*l.files[0].location,
        format!("blobs/sha256-{}", "a".repeat(64))
    );
    assert!(l.files[0].interpreted && !l.files[0].text);
    assert!(l.files[2].text && !l.files[2].interpreted);
    assert_eq!(l.files[4].size, 7);
    // The config and the layer of a type not shown are referenced all the same.
    assert_eq!(l.unshown.len(), 2);
    assert_eq!(
        l.unshown[0],
        (format!("blobs/sha256-{}", "c".repeat(64)).into(), 485)
    );
}

#[test]
fn bad_manifests_are_refused_by_rule() {
    let rule = |b: &[u8]| {
        listing(b)
            .map(|_| String::new())
            .unwrap_or_else(|e| e.rule())
    };
    use crate::format::Broken;
    assert_eq!(rule(b"not json"), "NotJson");
    assert_eq!(
        rule(br#"{"layers": [{"mediaType": "x", "digest": "sha256:"#),
        "NotJson"
    );
    assert!(listing(br#"{"layers": [{"#).unwrap_err().cut_short());
    assert_eq!(rule(b"[]"), "NotManifest");
    assert_eq!(rule(br#"{"schemaVersion": 2}"#), "NotManifest");
    assert_eq!(
        rule(br#"{"layers": [{"digest": "sha256:x", "size": 1}]}"#),
        "NotManifest"
    );
    assert_eq!(
        rule(br#"{"layers": [{"mediaType": "m", "digest": "sha256:x", "size": -1}]}"#),
        "NotManifest"
    );
    for digest in [
        "sha256:abc".to_string(),
        format!("sha512:{}", "a".repeat(64)),
        format!("sha256-{}", "a".repeat(64)),
        format!("sha256:{}/../../x", "a".repeat(64)),
        format!("sha256:{}", "g".repeat(64)),
        format!("sha256:../../../../etc/passwd{}", "a".repeat(44)),
    ] {
        let m = format!(r#"{{"layers": [{{"mediaType": "m", "digest": "{digest}", "size": 1}}]}}"#);
        assert_eq!(rule(m.as_bytes()), "BadDigest", "{digest}");
    }
    assert_eq!(rule(&vec![b' '; MAX_MANIFEST as usize + 1]), "TooLarge");
}

#[test]
fn models_are_named_as_ollama_list_names_them() {
    let name = |p: &str| model_name(&p.split('/').map(str::as_bytes).collect::<Vec<_>>());
    assert_eq!(
        name("registry.ollama.ai/library/llama3.2/latest").as_deref(),
        Some("llama3.2:latest")
    );
    assert_eq!(
        name("Registry.Ollama.AI/Library/llama3.2/1b").as_deref(),
        Some("llama3.2:1b")
    );
    assert_eq!(
        name("registry.ollama.ai/jmorgan/m/q4").as_deref(),
        Some("jmorgan/m:q4")
    );
    assert_eq!(
        name("hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF/Q4_K_M").as_deref(),
        Some("hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M")
    );
    assert_eq!(
        name("host/library/model/tag").as_deref(),
        Some("host/library/model:tag")
    );
    assert_eq!(
        name("localhost:5000/ns/m/t").as_deref(),
        Some("localhost:5000/ns/m:t")
    );
    for bad in [
        "registry.ollama.ai/library/llama3.2",
        "registry.ollama.ai/library/.hidden/latest",
        "registry.ollama.ai/lib.rary/m/latest",
        "registry.ollama.ai/library/m/la:test",
        "registry.ollama.ai/library/m/-x",
        "registry.ollama.ai/library/m/a b",
    ] {
        assert_eq!(name(bad), None, "{bad}");
    }
}

#[test]
fn blob_names_say_their_digest() {
    let hex = "0123456789abcdef".repeat(4);
    assert_eq!(
        blob_digest(format!("sha256-{hex}").as_bytes()),
        parse_hex(&hex)
    );
    assert_eq!(
        blob_digest(format!("sha256-{hex}-partial").as_bytes()),
        None
    );
    assert_eq!(blob_digest(format!("sha256-{hex}.tmp").as_bytes()), None);
    assert_eq!(blob_digest(b"sha256-123456"), None);
    assert_eq!(blob_digest(hex.as_bytes()), None);
}

#[test]
fn the_modelfile_is_ollama_shows() {
    let layers = [
        layer("model", 'a', 100),
        layer("adapter", 'b', 10),
        layer("projector", '3', 10),
        layer("template", 'd', 5),
        layer("system", '9', 5),
        layer("params", '1', 8),
        layer("license", 'e', 6),
        layer("license", 'f', 7),
        layer("messages", '7', 7),
    ]
    .join(",");
    let l = listing(&manifest(&layers)).unwrap();
    let texts: Vec<Option<&[u8]>> = vec![
        None,
        None,
        None,
        Some(b"{{ if .System }}<|system|>{{ .System }}{{ end }}\n{{ .Prompt }}"),
        Some(b"You are \"helpful\".\n"),
        Some(br#"{"num_ctx":4096,"stop":["<|eot_id|>","<|end|>"],"temperature":0.7,"mirostat_tau":1e6}"#),
        Some(b"MIT"),
        Some(b"LLAMA 3.2 COMMUNITY LICENSE\nterms"),
        Some(br#"[{"role":"user","content":"hi"},{"role":"assistant","content":" hello"}]"#),
    ];
    let got = String::from_utf8(modelfile("llama3.2:latest", &l, &texts)).unwrap();
    let want = "# Modelfile generated by \"ollama show\"\n\
# To build a new Modelfile based on this, replace FROM with:\n\
# FROM llama3.2:latest\n\
\n\
FROM ./model.gguf\n\
ADAPTER ./adapter.gguf\n\
FROM ./projector.gguf\n\
TEMPLATE \"{{ if .System }}<|system|>{{ .System }}{{ end }}\n{{ .Prompt }}\"\n\
SYSTEM \"\"\"You are \"helpful\".\n\"\"\"\n\
PARAMETER mirostat_tau 1e+06\n\
PARAMETER num_ctx 4096\n\
PARAMETER stop <|eot_id|>\n\
PARAMETER stop <|end|>\n\
PARAMETER temperature 0.7\n\
LICENSE MIT\n\
LICENSE \"LLAMA 3.2 COMMUNITY LICENSE\nterms\"\n\
MESSAGE user hi\n\
MESSAGE assistant \" hello\"\n";
    assert_eq!(got, want);
    // No template layer: ollama's default.
    let l = listing(&manifest(&layer("model", 'a', 1))).unwrap();
    let got = String::from_utf8(modelfile("m:t", &l, &[None])).unwrap();
    assert!(
        got.ends_with("FROM ./model.gguf\nTEMPLATE {{ .Prompt }}\n"),
        "{got}"
    );
}

#[test]
fn a_model_stored_as_safetensors_has_its_tensor_blobs_merged_and_its_json_files_by_name() {
    let named = |kind: &str, hex: char, name: &str| {
        let l = layer(kind, hex, 10);
        format!("{},\"name\":\"{name}\"}}", &l[..l.len() - 1])
    };
    let layers = [
        named("tensor", 'a', "model.embed_tokens.weight"),
        named("tensor", 'b', "model.layers.0.mlp.experts"),
        named("json", 'd', "config.json"),
        named("json", 'e', "tokenizer.json"),
        named("json", 'f', "draft/config.json"),
        named("json", '1', ".hidden"),
        named("json", '2', "template.json"),
        layer("template", '3', 5),
    ]
    .join(",");
    let l = listing(&manifest(&layers)).unwrap();
    let merged: Vec<&str> = l
        .files
        .iter()
        .filter(|f| f.merged == Some("model.tensors"))
        .map(|f| &f.name[..])
        .collect();
    assert_eq!(
        merged,
        [
            "model.embed_tokens.weight.safetensors",
            "model.layers.0.mlp.experts.safetensors"
        ]
    );
    assert!(
        l.files
            .iter()
            .filter(|f| f.merged.is_some())
            .all(|f| f.interpreted)
    );
    let shown: Vec<&str> = l
        .files
        .iter()
        .filter(|f| f.merged.is_none())
        .map(|f| &f.name[..])
        .collect();
    assert_eq!(shown, ["config.json", "tokenizer.json", "template"]);
    // A draft's, a hidden one, one that would take another file's name: referenced, not shown.
    assert_eq!(l.unshown.len(), 1 + 3);
}

#[test]
fn a_manifest_is_read_as_ollama_decodes_it() {
    // Keys matched as Go matches struct fields: case-insensitively, the last match winning. A
    // reader of the first exact "layers" would show blob a while ollama runs blob b.
    let hex = |c: char| c.to_string().repeat(64);
    let m = format!(
        r#"{{"layers": [{}], "Layers": [{{"MEDIATYPE": "application/vnd.ollama.image.model", "Digest": "sha256:{}", "SIZE": 7}}]}} and then anything"#,
        layer("model", 'a', 1),
        hex('b')
    );
    let l = listing(m.as_bytes()).unwrap();
    assert_eq!(l.files.len(), 1);
    assert_eq!(&*l.files[0].location, format!("blobs/sha256-{}", hex('b')));
    assert_eq!(l.files[0].size, 7);
    // Go folds ſ to s: "layerſ" is the layers field too.
    let m = format!(
        r#"{{"layers": [], "layerſ": [{}]}}"#,
        layer("template", 'c', 2)
    );
    assert_eq!(listing(m.as_bytes()).unwrap().files[0].name, "template");
}
