//! Command-line errors as one line, with the fix where clap's words miss it.

use super::Cli;

/// A command-line error as one line, as every other error is: clap's message, its items and
/// tips joined in (its usage where arguments are missing), then where the flags of the command
/// `args` (the arguments after the program's name) gave it to are listed.
pub fn one_line(e: &clap::Error, args: &[String]) -> String {
    use clap::CommandFactory;
    let text = e.render().to_string();
    // a word after the flags that clap takes for a subcommand: a switch's value given after a
    // space (`--sync-bn false`), or a stray word
    if let Some(word) = (text.strip_prefix("error: the subcommand '"))
        .and_then(|t| t.split_once("' cannot be used with"))
        .map(|(w, _)| w)
    {
        let before = args
            .iter()
            .rposition(|a| a == word)
            .and_then(|i| i.checked_sub(1))
            .map(|i| args[i].as_str());
        return match before {
            // (a switch that takes `=true|false`: clap's usage names it `--flag[=<BOOL>]`)
            Some(flag)
                if flag.starts_with("--")
                    && matches!(word, "true" | "false")
                    && text.contains(&format!("{flag}[=")) =>
            {
                format!(
                    "error: {flag} takes its value after `=`: {flag}={word}"
                )
            }
            _ => format!(
                "error: unexpected `{word}`: not a flag nor a flag's value (a subcommand comes first: mgtop-train view ...); `mgtop-train --help` lists the flags"
            ),
        };
    }
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let mut out = lines.next().unwrap_or("error: bad arguments").to_string();
    let (mut tips, mut usage) = (Vec::new(), None);
    for l in lines {
        if let Some(tip) = l.strip_prefix("tip: ") {
            tips.push(tip.to_string());
        } else if let Some(u) = l.strip_prefix("Usage: ") {
            usage = Some(u.to_string());
        } else if usage.is_some() || l.starts_with("For more information") {
            // the usage's other forms, the pointer to --help: said otherwise below
        } else {
            // an item of the message's list ("the following required arguments ...:")
            let sep = if out.ends_with(':') { " " } else { ", " };
            out = format!("{out}{sep}{l}");
        }
    }
    for tip in tips {
        out.push_str(&format!(" (tip: {tip})"));
    }
    // `mgtop-train`, or the subcommand given (`mgtop-train view`)
    let cli = Cli::command();
    let command = match args.iter().find_map(|a| cli.find_subcommand(a)) {
        Some(sub) => format!("mgtop-train {}", sub.get_name()),
        None => "mgtop-train".to_string(),
    };
    match (e.kind(), usage) {
        (clap::error::ErrorKind::MissingRequiredArgument, Some(u)) => {
            out.push_str(&format!("; usage: {u}"))
        }
        _ => out.push_str(&format!("; `{command} --help` lists the flags")),
    }
    out
}
