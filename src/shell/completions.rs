//! Shell completion scripts: clap_complete's, from the command line's definitions, with spec
//! and site names completed where a command takes them. The names come from `proxsync
//! complete-names specs|sites` (hidden), which reads the config and the status directory's file
//! names only: no lock, no database, no Proxmox VE call, so a tab press stays instant.
//!
//! clap_complete completes values only from a fixed list (its dynamic completion is still
//! unstable), so each shell's script gets a small addition of ours.

use clap_complete::Shell;

/// What `complete-names` lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Names {
    /// The specs that have a status file.
    Specs,
    /// The config's `[[site]]` names.
    Sites,
}

/// The subcommands whose positional arguments are spec names.
const SPEC_COMMANDS: [&str; 7] = [
    "plan",
    "reconcile",
    "adopt",
    "suspend",
    "resume",
    "status",
    "wait",
];

/// The options whose value is a spec name (`events --spec`, `inventory --host`).
const SPEC_OPTIONS: [&str; 2] = ["--spec", "--host"];

/// The completion script for `shell`: clap_complete's for `cmd`, with spec and site names.
pub fn script(shell: Shell, cmd: &mut clap::Command) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, cmd, "proxsync", &mut out);
    let generated = String::from_utf8_lossy(&out).into_owned();
    match shell {
        Shell::Bash => format!("{generated}\n{}", bash_names()),
        Shell::Zsh => zsh_names(&generated),
        Shell::Fish => format!("{generated}\n{}", fish_names()),
        _ => generated,
    }
    .into_bytes()
}

/// A wrapper around clap's `_proxsync`: names where they go, clap's completion elsewhere.
fn bash_names() -> String {
    let commands = SPEC_COMMANDS.join("|");
    let options = SPEC_OPTIONS.join("|");
    format!(
        r#"# Spec and site names (proxsync complete-names reads the config and the status files).
_proxsync_names() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}" i cmd= at=0 what=
    local -a config=()
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${{COMP_WORDS[i]}}" in
            --config) config=(--config "${{COMP_WORDS[i+1]}}"); ((i++)) ;;
            -*) ;;
            *) [[ -z $cmd ]] && cmd="${{COMP_WORDS[i]}}" && at=$i ;;
        esac
    done
    case "$prev" in
        --site) what=sites ;;
        {options}) what=specs ;;
        *)
            if [[ $cur != -* && -n $cmd ]]; then
                case "$cmd" in
                    {commands}) what=specs ;;
                    accept) [[ ${{COMP_WORDS[at+1]}} == site && $COMP_CWORD -eq $((at + 2)) ]] && what=sites ;;
                esac
            fi ;;
    esac
    if [[ -n $what ]]; then
        COMPREPLY=($(compgen -W "$(proxsync "${{config[@]}}" complete-names "$what" 2>/dev/null)" -- "$cur"))
        return 0
    fi
    _proxsync "$@"
}}
complete -F _proxsync_names -o nosort -o bashdefault -o default proxsync
"#
    )
}

/// clap's `_proxsync` with the spec and site arguments completed by our two functions.
fn zsh_names(generated: &str) -> String {
    let functions = "\
# Spec and site names (proxsync complete-names reads the config and the status files).
_proxsync_specs() {
    local -a names
    names=(${(f)\"$(proxsync complete-names specs 2>/dev/null)\"})
    _describe 'spec' names
}
_proxsync_sites() {
    local -a names
    names=(${(f)\"$(proxsync complete-names sites 2>/dev/null)\"})
    _describe 'site' names
}
";
    let lines: Vec<String> = generated
        .lines()
        .map(|line| {
            let spec_option = SPEC_OPTIONS
                .iter()
                .any(|o| line.contains(&format!("{o}=[")) && line.ends_with(":NAME:_default' \\"));
            if line.contains("(metadata.name") || spec_option {
                line.replace(":_default' \\", ":_proxsync_specs' \\")
            } else if line.contains("--site=[") && line.ends_with(":_default' \\") {
                line.replace(":_default' \\", ":_proxsync_sites' \\")
            } else {
                line.to_string()
            }
        })
        .collect();
    // After the `#compdef` line, which must stay first.
    match lines.split_first() {
        Some((first, rest)) => format!("{first}\n{functions}{}\n", rest.join("\n")),
        None => String::new(),
    }
}

/// Names beside clap's completions: fish adds them to what its other lines offer.
fn fish_names() -> String {
    let commands = SPEC_COMMANDS.join(" ");
    let mut out = String::from(
        "# Spec and site names (proxsync complete-names reads the config and the status files).\n",
    );
    out.push_str(&format!(
        "complete -c proxsync -n \"__fish_seen_subcommand_from {commands}\" -f -a \"(proxsync \
         complete-names specs 2>/dev/null)\"\n"
    ));
    for option in SPEC_OPTIONS {
        out.push_str(&format!(
            "complete -c proxsync -l {} -f -r -a \"(proxsync complete-names specs 2>/dev/null)\"\n",
            option.trim_start_matches('-')
        ));
    }
    out.push_str(
        "complete -c proxsync -l site -f -r -a \"(proxsync complete-names sites 2>/dev/null)\"\n",
    );
    out.push_str(
        "complete -c proxsync -n \"__fish_seen_subcommand_from accept; and __fish_seen_subcommand_from site\" -f -a \"(proxsync complete-names sites 2>/dev/null)\"\n",
    );
    out
}

/// The names `complete-names` prints: the specs with a status file in `status_dir`, or the
/// sites of the config. Nothing on an error: a completion says nothing rather than noise.
pub fn names(what: Names, config: &crate::config::Config) -> Vec<String> {
    match what {
        Names::Sites => config.sites.iter().map(|s| s.name.clone()).collect(),
        Names::Specs => crate::status::spec_names_of(&config.status_dir).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script_of(shell: Shell) -> String {
        let mut cmd = <crate::shell::cli::Cli as clap::CommandFactory>::command();
        String::from_utf8(script(shell, &mut cmd)).unwrap()
    }

    /// Every argument that takes a spec or site name is wired to the names, in each shell: a
    /// new such argument, or a change of clap's output, fails here.
    #[test]
    fn spec_and_site_arguments_complete_names_in_each_shell() {
        let zsh = script_of(Shell::Zsh);
        assert!(zsh.starts_with("#compdef proxsync\n"), "{}", &zsh[..40]);
        // plan, reconcile, adopt, suspend, resume, status, wait; events --spec,
        // inventory --host.
        assert_eq!(zsh.matches(":_proxsync_specs' \\").count(), 9, "{zsh}");
        // import --site, status --site, doctor --site.
        assert_eq!(zsh.matches(":_proxsync_sites' \\").count(), 3, "{zsh}");
        assert!(!zsh.contains("(metadata.name)]:NAME:_default"), "{zsh}");

        let bash = script_of(Shell::Bash);
        assert!(
            bash.contains("plan|reconcile|adopt|suspend|resume|status|wait) what=specs")
                && bash.contains("--spec|--host) what=specs")
                && bash.ends_with(
                    "complete -F _proxsync_names -o nosort -o bashdefault -o default proxsync\n"
                ),
            "{bash}"
        );
        let fish = script_of(Shell::Fish);
        assert!(
            fish.contains("-l site -f -r -a \"(proxsync complete-names sites 2>/dev/null)\""),
            "{fish}"
        );
    }
}
