//! The `--config` file: read as flags in TOML (a slip said by its line, with the key it likely
//! misspells), and its relative input paths checked against where the file lies.

use std::path::{Path, PathBuf};

use super::TrainArgs;
use crate::data::DataSpec;
use crate::files::read::{self, Expect, ReadError};

/// How long a config file given as a pipe (`--config <(...)`) may take to be written.
const PIPE_WAIT_S: u64 = 30;

/// The command whose own flag `key` is (`counts`: `scale`), where it is no training flag.
fn command_of(key: &str) -> Option<String> {
    use clap::CommandFactory;
    let cli = super::Cli::command();
    // (`scale` takes the training flags too: a training flag is none of its own)
    if cli.get_arguments().any(|a| a.get_long() == Some(key)) {
        return None;
    }
    let own =
        (cli.get_subcommands()).find(|c| c.get_arguments().any(|a| a.get_long() == Some(key)))?;
    Some(own.get_name().to_string())
}

/// Reads a config file into the same shape as the flags (and its text).
pub(super) fn read(path: &Path) -> Result<(TrainArgs, String), String> {
    let expect = Expect {
        what: "a config file",
        flag: "--config",
        max: read::SETTINGS_MAX,
        fix: "check that --config names a config file (TOML, keys named like the flags)",
    };
    let wait = std::time::Duration::from_secs(PIPE_WAIT_S);
    let text = read::read_text_or_pipe(path, &expect, wait).map_err(|e| match e {
        ReadError::Io { source, .. } => {
            format!("cannot read config file {}: {source}", path.display())
        }
        refused => format!("config file {refused}"),
    })?;
    let file = toml::from_str(&text).map_err(|e| {
        let (line, mut msg) = crate::text::toml_error(&text, &e);
        // (a dotted key `steps.x` is said by its first part, the flag's)
        let key = (msg.strip_prefix('`'))
            .and_then(|m| m.split_once("`: "))
            .map(|(k, _)| k.split('.').next().unwrap_or(k).to_string());
        let key = key.as_deref();
        // (a date or time unquoted is TOML's date-time, which serde hands over as a map)
        let table = toml::from_str::<toml::Table>(&text).ok();
        let datetime = key.is_some_and(|k| {
            (table.as_ref()).is_some_and(|t| t.get(k).is_some_and(toml::Value::is_datetime))
        });
        // (a key whose least value is more than 0 says so)
        if let Some(least) = key.and_then(|k| super::one_line::least_value(&format!("--{k}"))) {
            msg = msg.replace(
                "whole number of 0 or more",
                &format!("whole number of {least} or more"),
            );
        }
        if datetime {
            msg = msg.replace("invalid type: map", "a date-time");
        }
        // (a dotted key or a section makes a table of what is a flag's one value)
        let dotted = key.is_some_and(|k| {
            (table.as_ref()).is_some_and(|t| t.get(k).is_some_and(toml::Value::is_table))
        });
        // (a section's value error says only that: its type is no news)
        if msg.starts_with("invalid type: map") {
            if let Some((_, rule)) = msg.split_once(": the file's keys are at its top level") {
                msg = format!("the file's keys are at its top level{rule}");
            }
        }
        if let (true, Some(k), false) = (dotted, key, msg.contains("top level")) {
            msg = msg.replace("invalid type: map", "a table (a dotted key)");
            msg.push_str(&format!("; keys are flat, as the flags: `{k} = VALUE`"));
        }
        // (lines that end in a carriage return alone, as old Mac editors save them, are one
        // line to TOML)
        if text.contains('\r') && !text.contains('\n') {
            msg.push_str(&format!("; the file's lines end in a carriage return alone (CR): save it with ordinary line ends (LF or CRLF), e.g. `tr '\\r' '\\n' < {} > fixed.toml`", path.display()));
        }
        let at = line.map_or(String::new(), |l| format!(" (line {l})"));
        // (the keys' rule, where a key is what is wrong; a command's own flag is said as one)
        let unknown = (msg.strip_prefix("unknown key `")).and_then(|m| m.split_once('`'));
        let keys = match unknown.and_then(|(k, _)| Some((k, command_of(k)?))) {
            Some((key, command)) => format!("; `{key}` is a flag of `{command}`, given on its command line (`mgtop-train {command} --{key} ...`): a config file holds the training settings"),
            None if msg.contains("key") && !msg.contains("top level") && !dotted => {
                "; keys are the flag names without the leading --, e.g. batch-per-replica = 64".into()
            }
            None => String::new(),
        };
        format!("config file {}{at}: {msg}{keys}", path.display())
    })?;
    // (the file parsed as keys and values: what the typed reading does not say)
    let table = toml::from_str::<toml::Table>(&text).unwrap_or_default();
    if let Some((key, slip)) = past_f32(&file, &table) {
        let at = line_of(&text, &key);
        return Err(format!("config file {}{at}: {slip}", path.display()));
    }
    // (the flags take no empty value; in a file one is a slip, or a value left to fill in;
    // `tensorboard = ""` is the flag without its folder, as `--tensorboard` alone)
    if let Some(key) = (table.into_iter())
        .filter(|(k, _)| k != "tensorboard")
        .find(|(_, v)| v.as_str().is_some_and(|s| s.trim().is_empty()))
        .map(|(k, _)| k)
    {
        let at = line_of(&text, &key);
        return Err(format!(
            "config file {}{at}: `{key}` is empty; give it a value, or remove the line for the default",
            path.display()
        ));
    }
    Ok((file, text))
}

/// A decimal past what its key's 32-bit number holds (`momentum = 1e308`), said in the words
/// written, as the flag says it, not taken as infinity.
fn past_f32(file: &TrainArgs, table: &toml::Table) -> Option<(String, String)> {
    let narrow = [
        ("momentum", file.momentum),
        ("weight-decay", file.weight_decay),
        ("label-smoothing", file.label_smoothing),
    ];
    narrow.into_iter().find_map(|(key, read)| {
        let written = table.get(key)?.as_float()?;
        let said = format!("`{key} = {written:e}` is beyond the numbers the key holds (±3.4e38)");
        (read?.is_infinite() && written.is_finite()).then(|| (key.to_string(), said))
    })
}

/// ` (line N)`: where `key` is set in a config file's text, or nothing where no line plainly
/// sets it.
fn line_of(text: &str, key: &str) -> String {
    let line = text.lines().position(|l| {
        let l = l.trim_start().trim_start_matches(['"', '\'']);
        l.strip_prefix(key).is_some_and(|r| {
            r.trim_start_matches(['"', '\''])
                .trim_start()
                .starts_with('=')
        })
    });
    line.map_or(String::new(), |l| format!(" (line {})", l + 1))
}

/// A relative input path from a config file is read from the working directory, as on the
/// command line; one that names nothing there but does beside the file is the likely slip
/// (the file was written next to its data and is run from elsewhere), so it says how to mend it.
pub(super) fn beside(config: &Path, flags: &TrainArgs, file: &TrainArgs) -> Result<(), String> {
    let Some(dir) = config.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Ok(());
    };
    let data = |v: &Option<String>| -> Vec<PathBuf> {
        let spec = v.as_deref().and_then(|s| s.parse::<DataSpec>().ok());
        spec.map_or(vec![], |s| {
            s.paths().into_iter().map(Path::to_path_buf).collect()
        })
    };
    // (the key, whether the file's value is the one taken, its paths)
    let from_file = [
        ("data", flags.data.is_none(), data(&file.data)),
        ("val-data", flags.val_data.is_none(), data(&file.val_data)),
        (
            "init",
            flags.init.is_none(),
            file.init.iter().cloned().collect(),
        ),
        (
            "resume",
            flags.resume.is_none(),
            file.resume.iter().cloned().collect(),
        ),
    ];
    for (key, _, paths) in from_file.iter().filter(|(_, taken, _)| *taken) {
        for p in paths {
            let there = dir.join(p);
            if p.is_relative() && !p.exists() && there.exists() {
                return Err(format!(
                    "config file {}: {key} names {}, which is not in the working directory but is beside the config file: relative paths in a config file are read from the working directory, as on the command line; write {} (or an absolute path) in the file, or run from {}",
                    config.display(),
                    p.display(),
                    there.display(),
                    dir.display()
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
