//! Listeners added to the shipped envoy.yaml, for benchmarks that compare the filter against
//! no filter (or another configuration of it) in one Envoy, through one upstream.

/// The shipped listener (`llm_ingress`) copied as `name` on `port`: without the toolsift filter
/// when `config` is `None`, else with its plugin configuration text `from` replaced by `to`.
pub fn listener_copy(yaml: &str, name: &str, port: u16, config: Option<(&str, &str)>) -> String {
    let start = yaml.find("  - name: llm_ingress").unwrap();
    let end = yaml.find("  clusters:").unwrap();
    let listener = &yaml[start..end];
    let mut copy = String::new();
    let mut skipping = false;
    for line in listener.lines() {
        if config.is_none() && line.trim_start() == "- name: toolsift" {
            skipping = true;
        } else if line.trim_start() == "- name: envoy.filters.http.router" {
            skipping = false;
        }
        if !skipping {
            copy.push_str(line);
            copy.push('\n');
        }
    }
    if let Some((from, to)) = config {
        assert!(copy.contains(from), "no `{from}` in the listener:\n{copy}");
        copy = copy.replace(from, to);
    }
    let copy = copy
        .replace("name: llm_ingress", &format!("name: {name}"))
        .replace("stat_prefix: llm_ingress", &format!("stat_prefix: {name}"));
    // The listener's own port is the first `port_value:` in its block.
    let at = copy.find("port_value: ").unwrap() + "port_value: ".len();
    let digits = copy[at..].chars().take_while(char::is_ascii_digit).count();
    format!("{}{port}{}", &copy[..at], &copy[at + digits..])
}
