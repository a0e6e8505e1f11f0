//! Library enums as command-line values.
//!
//! A flag whose value names one of a library crate's enums (the controller,
//! the profile file format) is parsed into that enum once, here at the edge,
//! by [`LibraryEnum`]: clap lists the names in `--help` and refuses any other
//! with the list, and the code behind the flag matches on the enum. Enums the
//! command owns derive [`clap::ValueEnum`] instead.

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use std::ffi::OsStr;

/// A clap value parser over a library enum: its variants and their names.
#[derive(Clone, Copy)]
pub struct LibraryEnum<T: 'static> {
    /// Every variant the flag accepts, in the order `--help` lists them.
    choices: &'static [T],
    /// A variant's name on the command line.
    name: fn(T) -> &'static str,
}

impl<T: Copy> LibraryEnum<T> {
    /// The parser for `choices`, named by `name`.
    pub const fn new(choices: &'static [T], name: fn(T) -> &'static str) -> Self {
        Self { choices, name }
    }

    fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.choices.iter().map(|&choice| (self.name)(choice))
    }
}

impl<T: Copy + Send + Sync + 'static> TypedValueParser for LibraryEnum<T> {
    type Value = T;

    fn parse_ref(
        &self,
        command: &clap::Command,
        argument: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<T, clap::Error> {
        // clap's own check of the name gives its usual error, with the list.
        let name = PossibleValuesParser::new(self.names()).parse_ref(command, argument, value)?;
        self.choices
            .iter()
            .copied()
            .find(|&choice| (self.name)(choice) == name)
            .ok_or_else(|| clap::Error::new(clap::error::ErrorKind::InvalidValue).with_cmd(command))
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(self.names().map(PossibleValue::new)))
    }
}

/// `--controller`: the core's [`tailguard::ControllerChoice`].
pub const CONTROLLER: LibraryEnum<tailguard::ControllerChoice> = LibraryEnum::new(
    &tailguard::ControllerChoice::ALL,
    tailguard::ControllerChoice::name,
);

/// `tailguard sim --policy`: the simulator's
/// [`tailguard_sim::policy::PolicyName`].
pub const SIM_POLICY: LibraryEnum<tailguard_sim::policy::PolicyName> = LibraryEnum::new(
    &tailguard_sim::policy::PolicyName::ALL,
    tailguard_sim::policy::PolicyName::name,
);

/// The profile formats `tailguard tune --format` writes.
const PROFILE_FORMATS: [tailguard::profile_file::ProfileFormat; 2] = [
    tailguard::profile_file::ProfileFormat::Toml,
    tailguard::profile_file::ProfileFormat::SeastarYaml,
];

/// `tailguard tune --format`: the library's
/// [`tailguard::profile_file::ProfileFormat`], `toml` or `seastar`.
pub const PROFILE_FORMAT: LibraryEnum<tailguard::profile_file::ProfileFormat> =
    LibraryEnum::new(&PROFILE_FORMATS, profile_format_name);

fn profile_format_name(format: tailguard::profile_file::ProfileFormat) -> &'static str {
    match format {
        tailguard::profile_file::ProfileFormat::SeastarYaml => "seastar",
        _ => "toml",
    }
}

/// The name of a value of an enum the command owns, as the command line
/// spells it (for commands that reproduce a run).
pub fn name_of<T: clap::ValueEnum>(value: &T) -> String {
    value
        .to_possible_value()
        .map(|possible| possible.get_name().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Flags {
        #[arg(long, value_parser = CONTROLLER, default_value = "fixed")]
        controller: tailguard::ControllerChoice,
    }

    #[test]
    fn a_library_enum_parses_its_names_and_refuses_others_with_the_list() {
        let flags = Flags::try_parse_from(["t", "--controller", "adaptive"]).unwrap();
        assert_eq!(flags.controller, tailguard::ControllerChoice::Adaptive);
        let flags = Flags::try_parse_from(["t"]).unwrap();
        assert_eq!(flags.controller, tailguard::ControllerChoice::Fixed);
        let error = Flags::try_parse_from(["t", "--controller", "pid"]).unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains("pid") && text.contains("fixed") && text.contains("adaptive"),
            "{text}"
        );
    }

    #[test]
    fn every_profile_format_has_its_own_name() {
        let names: Vec<&str> = PROFILE_FORMAT.names().collect();
        assert_eq!(names, ["toml", "seastar"]);
    }
}
