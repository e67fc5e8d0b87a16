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
    // Rust's words for a number that does not parse, in a user's (a negative one is one)
    let negative = out.contains("invalid value '-")
        && out.contains("invalid digit found in string")
        && (out.split("invalid value '-").nth(1))
            .is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()));
    if negative {
        // the flag's least value: its range's where it has one (what a 0 given is told)
        let flag = (out.split("for '").nth(1)).and_then(|r| r.split([' ', '\'']).next());
        let least = flag.and_then(least_value).unwrap_or(0);
        out = out.replace(
            "invalid digit found in string",
            &format!("negative: use {least} or more"),
        );
    }
    // clap's range, `0 is not in 1..18446744073709551615`, as the least value to give
    if let Some((value, range)) = (out.split_once(" is not in "))
        .and_then(|(head, rest)| Some((head.rsplit(": ").next()?, rest.split(';').next()?)))
    {
        let (lo, hi) = range.split_once("..").unwrap_or(("", ""));
        let hi = hi.trim_start_matches('=');
        let open = [u64::MAX.to_string(), usize::MAX.to_string()].contains(&hi.to_string());
        let words = match () {
            _ if lo.is_empty() => None,
            _ if open => Some(format!("below {lo}: use {lo} or more")),
            _ if range.contains("..=") => Some(format!("out of range: use {lo} to {hi}")),
            _ => None,
        };
        if let Some(words) = words {
            out = out.replace(&format!("{value} is not in {range}"), &words);
        }
    }
    // a number past what the flag's type holds: the flag's range where it has one
    if out.contains("number too large to fit in target type") {
        let flag = (out.split("for '").nth(1)).and_then(|r| r.split([' ', '\'']).next());
        if let Some(range) = flag.and_then(range_words) {
            out = out.replace(
                "number too large to fit in target type",
                &format!("too large: {range}"),
            );
        }
    }
    for (rust, said) in [
        ("invalid digit found in string", "not a whole number"),
        ("number too large to fit in target type", "too large"),
        ("invalid float literal", "not a number"),
        ("cannot parse integer from empty string", "no number given"),
    ] {
        out = out.replace(rust, said);
    }
    // a value that begins with `-` is taken for a flag: `--name=-x` gives it
    if let Some(dash) = (text.strip_prefix("error: unexpected argument '"))
        .and_then(|t| t.split_once('\''))
        .map(|(a, _)| a)
        .filter(|a| a.starts_with('-') && !a.starts_with("--"))
    {
        let given = |a: &&String| a.starts_with(dash) && !a.starts_with("--");
        let flag = args
            .iter()
            .position(|a| given(&a))
            .and_then(|i| i.checked_sub(1))
            .map(|i| args[i].as_str())
            .filter(|f| f.starts_with("--") && !f.contains('='))
            // (one that takes a value: a switch's hint would be another mistake)
            .filter(|f| {
                let cli = Cli::command();
                let mut all = cli
                    .get_arguments()
                    .chain(cli.get_subcommands().flat_map(|c| c.get_arguments()));
                all.any(|a| {
                    a.get_long() == Some(&f[2..])
                        && a.get_action().takes_values()
                        && a.get_num_args().is_none_or(|n| n.min_values() >= 1)
                })
            });
        if let Some(flag) = flag {
            let value = args.iter().find(given).map_or(dash, |a| a);
            out.push_str(&format!(
                " (a value that begins with - goes after `=`: {flag}={value})"
            ));
        }
    }
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
    // `mgtop-train`, or the subcommand given (`mgtop-train view`): the first word (a flag's
    // value that names one, `--run-dir runs`, is not it)
    let cli = Cli::command();
    let command = match args.first().and_then(|a| cli.find_subcommand(a)) {
        Some(sub) => format!("mgtop-train {}", sub.get_name()),
        None => "mgtop-train".to_string(),
    };
    match (e.kind(), usage) {
        (clap::error::ErrorKind::MissingRequiredArgument, Some(u)) => {
            out.push_str(&format!("; usage: {u}"))
        }
        // (a word that is no command: the commands there are)
        (clap::error::ErrorKind::InvalidSubcommand, _) => {
            let names: Vec<&str> = (cli.get_subcommands())
                .filter(|c| !c.is_hide_set() && c.get_name() != "help")
                .map(|c| c.get_name())
                .collect();
            out.push_str(&format!(
                "; the commands are {} (training is the program without one); `{command} --help` lists them and the flags",
                names.join(", ")
            ))
        }
        _ => out.push_str(&format!("; `{command} --help` lists the flags")),
    }
    out
}

/// What the train command says of whole-number flag `flag` given `value`, where it refuses it
/// (by clap, or else by the checks the settings go through): `None` where it takes it, or the
/// refusal is of another setting.
fn refusal(flag: &str, value: u64) -> Option<String> {
    use clap::Parser;
    let text = match Cli::try_parse_from(["mgtop-train", &format!("{flag}={value}")]) {
        Err(e) if e.kind() == clap::error::ErrorKind::ValueValidation => e.render().to_string(),
        Err(_) => return None,
        Ok(cli) => match cli.train.resolve() {
            Err(refused) => refused,
            Ok((cfg, _)) => crate::engine::check_settings(&cfg).err()?.to_string(),
        },
    };
    text.contains(flag).then_some(text)
}

/// The least value a whole-number flag of the train command takes, where its range has one
/// (`None`: the flag is not one of those, or 0 is not refused for its range).
pub(super) fn least_value(flag: &str) -> Option<u64> {
    let text = refusal(flag, 0)?;
    // clap's range (`0 is not in 1..N`), the checks' (`out of range: use 1 to N`, `use 1
    // (no accumulation) to 65536`, `use 1 or more`): the number after the words
    let after = |words: &str| {
        let rest = text.split(words).nth(1)?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<u64>().ok()
    };
    after(" is not in ").or_else(|| after(": use "))
}

/// The range a whole-number flag of the train command takes, as its refusal of a value too
/// large says it (`use 1 to 1048576 ...`), where it has one.
fn range_words(flag: &str) -> Option<String> {
    let text = refusal(flag, u64::MAX)?;
    let (_, rest) = text.split_once("out of range: ")?;
    Some(rest.lines().next()?.trim().to_string())
}
