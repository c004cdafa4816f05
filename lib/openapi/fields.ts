/**
 * Fields → JSON Schema: a catalog collection's documents, its create and patch bodies, from its field definitions
 * (catalog/), as answers show them and as writes take them.
 */
import { type CollectionDef, type DomainDef, type FieldDef, type FieldFormat, type FieldType, PLATFORM_FIELDS, SETTABLE_FIELDS } from "../../catalog";
import { PASSWORD_MIN_LENGTH } from "../grant-validation";
import { GROUP_PATTERN, MAX_ARRAY } from "../validate";
import { ref, type Schema, schemaName } from "./common";

export const FORMAT_SCHEMA: Record<FieldFormat, Schema> = {
	objectId: { pattern: "^[0-9a-f]{24}$" },
	email: { format: "email" },
	uri: { format: "uri" },
	uuid: { format: "uuid" },
	// The patterns below are those lib/validate.ts enforces, so a client that validates first gets the same answer.
	e164: { pattern: "^\\+[1-9]\\d{6,14}$" },
	semver: { pattern: "^(0|[1-9]\\d*)\\.(0|[1-9]\\d*)\\.(0|[1-9]\\d*)(?:-[0-9A-Za-z.-]+)?(?:\\+[0-9A-Za-z.-]+)?$" },
	hex: { pattern: "^[0-9a-fA-F]+$" },
	group: { pattern: GROUP_PATTERN },
	// No JSON Schema format expresses these two; the description carries the rule instead.
	"ip-or-cidr": {},
	cron: {},
};

export const FORMAT_HINT: Partial<Record<FieldFormat, string>> = {
	"ip-or-cidr": "IP address or CIDR range",
	cron: "cron expression",
	e164: "phone number in E.164 format",
	semver: "SemVer version",
	objectId: "24-hex object id",
};

/** Requests accept a date as ISO 8601 or Unix milliseconds; responses always carry the normalised ISO string. */
export type Mode = "doc" | "write";

export function scalar(type: FieldType, format: FieldFormat | undefined, values: readonly string[] | undefined, mode: Mode): Schema {
	let s: Schema;
	switch (type) {
		case "date":
			s = mode === "doc" ? { type: "string", format: "date-time" } : { type: ["string", "integer"], format: "date-time" };
			break;
		case "any":
			s = {};
			break;
		case "object":
			s = { type: "object" };
			break;
		case "array":
			s = { type: "array" };
			break;
		default:
			s = { type };
	}
	if (format && type === "string") Object.assign(s, FORMAT_SCHEMA[format]);
	if (values) s.enum = [...values];
	return s;
}

export function describe(def: FieldDef, mode: Mode): string | undefined {
	const parts = [def.description];
	const hint = def.format && FORMAT_HINT[def.format];
	if (hint && !def.description?.includes(hint)) parts.push(def.type === "array" ? `items: ${hint}` : hint);
	if (def.type === "date" && mode === "write") parts.push("ISO 8601 or Unix milliseconds");
	if (def.relation) parts.push(`populatable relation to ${def.relation}`);
	if (def.fileRef) parts.push("id of a special/files document (not populatable)");
	const text = parts.filter(Boolean).join("; ");
	return text || undefined;
}

/** Adds `null` as an accepted value (a patch may clear a non-required field, so stored documents can hold null). */
export function orNull(s: Schema): Schema {
	if (Array.isArray(s.anyOf)) return { ...s, anyOf: [...s.anyOf, { type: "null" }] };
	if (s.type === undefined) return s; // `any` already admits null
	const out: Schema = { ...s, type: [...(Array.isArray(s.type) ? s.type : [s.type]), "null"] };
	if (Array.isArray(s.enum)) out.enum = [...s.enum, null];
	return out;
}

export interface FieldOpts {
	mode: Mode;
	nullable?: boolean;
	readOnly?: boolean;
	/** Drops writeOnly for a value that one response (a create) reveals once. */
	reveal?: string;
}

export function fieldSchema(def: FieldDef, refs: Map<string, string>, o: FieldOpts): Schema {
	let s: Schema;
	if (def.type === "array") {
		let items = scalar(def.items ?? "any", def.format, def.enum, o.mode);
		if (o.mode === "doc" && def.relation && refs.has(def.relation)) items = { anyOf: [items, ref("schemas", refs.get(def.relation)!)] };
		s = { type: "array", items, maxItems: MAX_ARRAY };
	} else {
		s = scalar(def.type, def.format, def.enum, o.mode);
		if (def.maxLength !== undefined) s.maxLength = def.maxLength;
		if (def.minimum !== undefined) s.minimum = def.minimum;
		// A populated relation replaces the id by the target document.
		if (o.mode === "doc" && def.relation && refs.has(def.relation)) s = { anyOf: [s, ref("schemas", refs.get(def.relation)!)] };
	}
	if (o.nullable) s = orNull(s);
	const description = o.reveal ?? describe(def, o.mode);
	if (description) s.description = description;
	if (def.example !== undefined && !(def.writeOnly && o.mode === "doc" && o.reveal === undefined)) s.examples = [def.example];
	if (o.readOnly) s.readOnly = true;
	if (def.writeOnly && o.reveal === undefined) s.writeOnly = true;
	return s;
}

/** Platform fields that stay null or absent until the matching change happens. */
export const NULLABLE_PLATFORM = new Set(["deleted_at", "deleted_by", "deleted_in", "restored_at", "restored_by", "restored_in"]);

/**
 * Write-only values that a create response reveals exactly once (the collection hooks add them to that response):
 * described here because the catalog only says "never returned".
 */
export const REVEALED_ON_CREATE: Record<string, Record<string, string>> = {
	"auth/apts": { token: "The personal token itself, `APT-<suffix>`; returned only in the creation response, never again" },
	"domain/clients": { secret: "client_secret; returned only in the creation response, and only when the platform generated it" },
};

/** What the platform writes in its helper fields (engine/document.ts and engine/collection-actions.ts: `randomHelper(12)`, `String(Date.now())`). */
export const PLATFORM_PATTERNS: Record<string, string> = { rand: "^[A-Za-z0-9_-]{16}$", timestamp: "^[0-9]{1,16}$" };

export function docSchema(d: DomainDef, c: CollectionDef, refs: Map<string, string>, reveal: Record<string, string> = {}): Schema {
	const properties: Record<string, Schema> = {};
	for (const [k, def] of Object.entries(PLATFORM_FIELDS)) {
		properties[k] = fieldSchema(def, refs, { mode: "doc", readOnly: true, nullable: NULLABLE_PLATFORM.has(k) });
		if (PLATFORM_PATTERNS[k]) properties[k].pattern = PLATFORM_PATTERNS[k];
	}
	for (const [k, def] of Object.entries(SETTABLE_FIELDS)) properties[k] = fieldSchema(def, refs, { mode: "doc", nullable: true });
	for (const [k, def] of Object.entries(c.fields))
		if (!def.internal || k in reveal) properties[k] = fieldSchema(def, refs, { mode: "doc", nullable: !def.required, reveal: reveal[k], readOnly: def.readOnly });
	// Only `id` is in every answer: a projection, a populate `select` or a grant's field list may leave out any other
	// field. What an answer that nothing narrowed always holds is the `<Name>Full` schema's list (fullSchema).
	return {
		type: "object",
		description:
			`${c.description} (${d.name}/${c.name}): a document as any read returns it. A \`projection\`, a populate \`select\` or a grant's field list ` +
			`returns a subset of these fields, so only \`id\` is certain; an answer that nothing narrowed is a \`${schemaName(d, c)}Full\`. Write-only fields are never returned.`,
		required: ["id"],
		properties,
	};
}

/**
 * The documents of a collection as one caller reads them (the MCP `collections` tool): the fields of `fields` (null:
 * every field) and `id`, nothing write-only, relations as their plain ids, no examples. A grant's dotted entry
 * (`props.color`) shows its top-level field. Self-contained: no `$ref` into the OpenAPI document.
 */
export function documentSchema(d: DomainDef, c: CollectionDef, fields: readonly string[] | null): Schema {
	const all = docSchema(d, c, new Map()).properties as Record<string, Schema>;
	const shown = fields === null ? null : new Set(fields.map((f) => f.split(".")[0]));
	const properties: Record<string, Schema> = {};
	for (const [k, s] of Object.entries(all)) {
		if (s.writeOnly || (k !== "id" && shown && !shown.has(k))) continue;
		const { examples: _examples, ...rest } = s;
		properties[k] = rest;
	}
	return { type: "object", description: `${c.description} (${d.name}/${c.name})`, required: ["id"], properties };
}

/**
 * The platform fields every stored document holds from its creation on (the engine's create, `platformDoc`): an
 * answer that no projection and no field list narrowed carries each of them (`deleted_at` null while live; `shares`,
 * `groups`, `version` null once a patch cleared them). `deleted_by`, `restored_*` appear only with their change.
 */
export const ALWAYS_RETURNED = [
	"id",
	"owner",
	"clients",
	"created_at",
	"created_by",
	"created_in",
	"updated_at",
	"updated_by",
	"updated_in",
	"deleted_at",
	"shares",
	"groups",
	"version",
	"rand",
	"timestamp",
] as const;

/** The fields an un-narrowed answer of the collection always holds: the platform's, and the collection's required ones that are returned. */
export function fullyReturned(c: CollectionDef): string[] {
	return [
		...ALWAYS_RETURNED,
		...Object.entries(c.fields)
			.filter(([, f]) => f.required && !f.internal && !f.writeOnly)
			.map(([k]) => k),
	];
}

/**
 * `<Name>Full`: the document as a read returns it when nothing narrows the caller's view (no `projection`, no
 * populate `select`, a grant without a field list), every field it always holds required. Narrowed answers are
 * `<Name>` (only `id` required): a field a grant can hide cannot be required of every answer (docs/api.md, "Fields
 * of an answer").
 */
export function fullSchema(d: DomainDef, c: CollectionDef): Schema {
	return {
		description:
			`A ${d.name}/${c.name} document read in full: what every answer carries when no \`projection\`, populate \`select\` or grant field list narrows it. ` +
			`A narrowed answer is a \`${schemaName(d, c)}\` (only \`id\` certain).`,
		allOf: [ref("schemas", schemaName(d, c))],
		required: fullyReturned(c),
	};
}

/** An answer's document: in full, or narrowed by a projection or a grant's field list (`id` and what the view keeps). */
export function viewOf(name: string, narrowed = name): Schema {
	return { anyOf: [ref("schemas", `${name}Full`), ref("schemas", narrowed)] };
}

/** Rules a collection's hooks enforce on a written field beyond its catalog entry (services/identity.service.ts). */
export const WRITE_RULES: Record<string, Record<string, { schema: Schema; rule: string }>> = {
	"identity/users": { password: { schema: { minLength: PASSWORD_MIN_LENGTH }, rule: `at least ${PASSWORD_MIN_LENGTH} characters (NIST SP 800-63B)` } },
};

export function writeField(d: DomainDef, c: CollectionDef, k: string, s: Schema): Schema {
	const r = WRITE_RULES[`${d.name}/${c.name}`]?.[k];
	return r ? { ...s, ...r.schema, description: [s.description, r.rule].filter(Boolean).join("; ") } : s;
}

export function bodyProperties(d: DomainDef, c: CollectionDef, patch: boolean, refs: Map<string, string>): Record<string, Schema> {
	const properties: Record<string, Schema> = {};
	for (const [k, def] of Object.entries(SETTABLE_FIELDS)) properties[k] = fieldSchema(def, refs, { mode: "write", nullable: patch });
	for (const [k, def] of Object.entries(c.fields))
		if (!def.internal && !def.readOnly) properties[k] = writeField(d, c, k, fieldSchema(def, refs, { mode: "write", nullable: patch && !def.required }));
	return properties;
}

export function createSchema(d: DomainDef, c: CollectionDef, refs: Map<string, string>): Schema {
	const s: Schema = {
		type: "object",
		description: `A new ${d.name}/${c.name} document. Platform-managed fields (id, owner, clients, created_*, ...) are refused with 400.`,
		additionalProperties: false,
		properties: bodyProperties(d, c, false, refs),
	};
	const required = Object.entries(c.fields)
		.filter(([, f]) => f.required)
		.map(([k]) => k);
	if (required.length) s.required = required;
	// Collection rules ("one of username, email or phone") become anyOf-of-required, so validators enforce them too.
	const rules = (c.rules ?? []).map((r) => ({ anyOf: r.anyOf.map((f) => ({ required: [f] })), description: r.message }));
	if (rules.length === 1) Object.assign(s, { anyOf: rules[0].anyOf });
	else if (rules.length > 1) s.allOf = rules;
	if (rules.length) s.description += ` Rules: ${(c.rules ?? []).map((r) => r.message).join("; ")}.`;
	return s;
}

export function patchSchema(d: DomainDef, c: CollectionDef, refs: Map<string, string>): Schema {
	return {
		type: "object",
		description: `Fields of a ${d.name}/${c.name} document to change; omitted fields stay unchanged, null clears a non-required field.`,
		additionalProperties: false,
		minProperties: 1,
		properties: bodyProperties(d, c, true, refs),
	};
}
