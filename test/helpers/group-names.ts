/** Group names the platform accepts and refuses (issue 23 item 10; docs/decisions.md, "Group names"). */

const label63 = "a".repeat(63);
/** 253 characters: three 63-character labels, one of 61, three dots. */
export const name253 = [label63, label63, label63, "b".repeat(61)].join(".");

export const ACCEPTED = [
	"team@example.com",
	"eng.example.com",
	"team-x.example",
	"a.b",
	"123.example",
	"first.last+ops_2%x@mail.example.org",
	"xn--bcher-kva.example",
	"Ops.Example.COM",
	`${label63}.example`,
	`${"l".repeat(64)}@example.com`,
	name253,
];

/** [value, why it is refused]. */
export const REFUSED: Array<[string, string]> = [
	["team-x", "a single label"],
	["localhost", "a single label"],
	["team_x.example", "an underscore"],
	["-team.example", "a leading hyphen"],
	["team-.example", "a trailing hyphen"],
	[`${"a".repeat(64)}.example`, "a 64-character label"],
	[`${name253}c`, "254 characters"],
	["team x.example", "a space"],
	[" team.example", "a leading space"],
	["tëam.example", "a non-ASCII letter"],
	["eng.example.com.", "a trailing dot"],
	[".example.com", "an empty first label"],
	["eng..example", "an empty label"],
	["10.0.0.1", "an IPv4 address"],
	["eng.example.123", "an all-digit last label"],
	["team@localhost", "an email whose domain is one label"],
	["@example.com", "an empty local part"],
	[".team@example.com", "a local part starting with a dot"],
	["te..am@example.com", "two dots in a local part"],
	[`${"l".repeat(65)}@example.com`, "a 65-character local part"],
	["a@b@example.com", "two @"],
	["team.example\n", "a newline"],
	["", "empty"],
];
