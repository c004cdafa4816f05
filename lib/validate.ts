/**
 * Body validation from the catalog: types, formats, enums, required fields, platform-managed fields and
 * collection rules. Every failure is a 400 whose message names the field.
 */
import { PLATFORM_FIELDS, SETTABLE_FIELDS, type CollectionDef, type FieldDef, type FieldType } from "../catalog";
import { badRequest } from "./errors";
import { isIpOrCidr } from "./cidr";

const FORBIDDEN_KEYS = new Set(["__proto__", "constructor", "prototype"]);
export const MAX_ARRAY = 1000;

/**
 * A group name (spec: "Email or FQDN list for group access"; docs/decisions.md, "Group names"). An FQDN here: two
 * labels or more separated by dots, each 1-63 ASCII letters, digits or hyphens, neither starting nor ending with a
 * hyphen, 253 characters at most, no trailing dot, the last label not all digits (so never an IPv4 address). An email:
 * a local part of 1-64 characters (dot-separated runs of letters, digits, `_ % + -`), `@`, such an FQDN. The same
 * text is the OpenAPI pattern. Group names are compared as written (case-sensitively).
 */
const LABEL = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
const FQDN_PATTERN = `(?=.{1,253}$)(?:${LABEL}\\.)+(?![0-9]+$)${LABEL}`;
export const GROUP_PATTERN = `^(?:(?=[^@]{1,64}@)[A-Za-z0-9_%+-]+(?:\\.[A-Za-z0-9_%+-]+)*@)?${FQDN_PATTERN}$`;
const GROUP_RE = new RegExp(GROUP_PATTERN);
/** The longest group name: a 64-character local part, `@`, a 253-character FQDN. */
const GROUP_MAX = 64 + 1 + 253;
export const isGroupName = (v: unknown): v is string => typeof v === "string" && v.length <= GROUP_MAX && GROUP_RE.test(v);
/** The rule a refused group name is told (after `<field> must be`). */
export const GROUP_RULE =
	"a group name: an email (team@example.com) or an FQDN (eng.example.com: two or more dot-separated labels of 1-63 letters, digits or hyphens, no hyphen at a label's ends, 253 characters at most)";

const FORMATS: Record<string, (v: string) => boolean> = {
	email: (v) => /^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(v) && v.length <= 320,
	e164: (v) => /^\+[1-9]\d{6,14}$/.test(v),
	semver: (v) => /^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$/.test(v),
	uri: (v) => {
		try {
			const u = new URL(v);
			return u.protocol === "https:" || u.protocol === "http:";
		} catch {
			return false;
		}
	},
	uuid: (v) => /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(v),
	hex: (v) => /^[0-9a-f]+$/i.test(v),
	objectId: (v) => /^[0-9a-f]{24}$/i.test(v),
	"ip-or-cidr": (v) => isIpOrCidr(v),
	cron: (v) => v.trim().split(/\s+/).length >= 5,
	group: isGroupName,
};

const FORMAT_NAMES: Record<string, string> = {
	email: "an email address",
	e164: "a phone number in E.164 format",
	semver: "a SemVer version",
	uri: "an http(s) URL",
	uuid: "a UUID",
	hex: "a hex string",
	objectId: "a 24-hex object id",
	"ip-or-cidr": "an IP or CIDR range",
	cron: "a cron expression",
	group: GROUP_RULE,
};

export function isPlainObject(v: unknown): v is Record<string, unknown> {
	if (v === null || typeof v !== "object" || Array.isArray(v)) return false;
	const proto = Object.getPrototypeOf(v);
	return proto === Object.prototype || proto === null;
}

function checkType(name: string, type: FieldType, v: unknown): void {
	const ok =
		type === "any" ||
		(type === "string" && typeof v === "string") ||
		(type === "number" && typeof v === "number" && Number.isFinite(v)) ||
		(type === "integer" && Number.isInteger(v)) ||
		(type === "boolean" && typeof v === "boolean") ||
		(type === "object" && isPlainObject(v)) ||
		(type === "array" && Array.isArray(v)) ||
		(type === "date" && (typeof v === "string" || typeof v === "number") && !Number.isNaN(new Date(v as string).getTime()));
	if (!ok)
		throw badRequest(
			`${name} must be ${type === "integer" || type === "array" || type === "object" ? "an" : "a"} ${type === "date" ? "date (ISO 8601 or Unix milliseconds)" : type}`,
		);
}

function checkScalar(name: string, def: Pick<FieldDef, "format" | "enum" | "maxLength" | "minimum">, v: unknown): void {
	if (typeof v === "string") {
		if (def.maxLength !== undefined && v.length > def.maxLength) throw badRequest(`${name} must be at most ${def.maxLength} characters`);
		if (def.format && !FORMATS[def.format](v)) throw badRequest(`${name} must be ${FORMAT_NAMES[def.format]}`);
	}
	if (def.enum && !def.enum.includes(v as string)) throw badRequest(`${name} must be one of ${def.enum.join(", ")}`);
	if (def.minimum !== undefined && typeof v === "number" && v < def.minimum) throw badRequest(`${name} must be at least ${def.minimum}`);
}

/** How deeply a free-form value (props, config values, a saga stage's `req`...) may nest objects and arrays. */
export const MAX_NESTING = 16;
const tooDeep = (name: string) => badRequest(`${name} is too deeply nested (at most ${MAX_NESTING} levels)`);

/** The nesting limit alone, for free-form values whose keys are kept as they are (a saga stage's `req` and `res`). */
export function checkNesting(name: string, v: unknown, depth = 0): void {
	if (depth > MAX_NESTING) throw tooDeep(name);
	if (v && typeof v === "object") for (const x of Object.values(v)) checkNesting(name, x, depth + 1);
}

/**
 * Keys of free-form objects (props, config values, grant times...), at any depth: none that could reach
 * Object.prototype, and none a stored document may not have (no `.`, no leading `$`: lib/query.ts checkKeys; no NUL).
 */
export function checkKeys(name: string, v: unknown, depth = 0): void {
	if (depth > MAX_NESTING) throw tooDeep(name);
	if (Array.isArray(v)) v.forEach((x, i) => checkKeys(`${name}[${i}]`, x, depth + 1));
	else if (v && typeof v === "object")
		for (const k of Object.keys(v)) {
			if (FORBIDDEN_KEYS.has(k)) throw badRequest(`${name}: key '${k}' is not allowed`);
			if (k.includes(".") || k.startsWith("$")) throw badRequest(`${name}: key '${k}' must not contain '.' or start with '$'`);
			if (k.includes("\0")) throw badRequest(`${name}: a key must not contain NUL`);
			checkKeys(`${name}.${k}`, (v as Record<string, unknown>)[k], depth + 1);
		}
}

export function validateValue(name: string, def: FieldDef, v: unknown): unknown {
	checkType(name, def.type, v);
	if (def.type === "array") {
		const arr = v as unknown[];
		if (arr.length > MAX_ARRAY) throw badRequest(`${name} accepts at most ${MAX_ARRAY} items`);
		arr.forEach((x, i) => {
			if (def.items) checkType(`${name}[${i}]`, def.items, x);
			checkScalar(`${name}[${i}]`, { format: def.format, enum: def.enum }, x);
		});
		checkKeys(name, v);
		return arr;
	}
	if (def.type === "object" || def.type === "any") checkKeys(name, v);
	checkScalar(name, def, v);
	if (def.type === "date") return new Date(v as string | number).toISOString();
	return v;
}

export type WriteMode = "create" | "patch";

export function fieldDef(col: CollectionDef, name: string): FieldDef | undefined {
	return Object.prototype.hasOwnProperty.call(col.fields, name)
		? col.fields[name]
		: Object.prototype.hasOwnProperty.call(SETTABLE_FIELDS, name)
			? SETTABLE_FIELDS[name]
			: undefined;
}

/**
 * Validates a create or patch body and returns the clean values to store (dates normalised).
 * `prefix` names items of a bulk body (`items[3].`).
 */
export function validateBody(col: CollectionDef, body: unknown, mode: WriteMode, prefix = ""): Record<string, unknown> {
	if (!isPlainObject(body)) throw badRequest(`${prefix || "body"} must be a JSON object`);
	const out: Record<string, unknown> = {};
	for (const key of Object.keys(body)) {
		const name = prefix + key;
		if (Object.prototype.hasOwnProperty.call(PLATFORM_FIELDS, key) || col.fields[key]?.internal || col.fields[key]?.readOnly) throw badRequest(`${name} is set by the platform`);
		const def = FORBIDDEN_KEYS.has(key) ? undefined : fieldDef(col, key);
		if (!def) throw badRequest(`${name} is not a field of ${col.name}`);
		const v = body[key];
		if (v === null || v === undefined) {
			if (mode === "create" || def.required) throw badRequest(`${name} must not be null`);
			out[key] = null;
			continue;
		}
		out[key] = validateValue(name, def, v);
	}
	if (mode === "create") {
		for (const [key, def] of Object.entries(col.fields))
			if (def.required && !def.internal && !def.readOnly && out[key] === undefined) throw badRequest(`${prefix}${key} is required`);
		checkRules(col, out);
	} else if (Object.keys(out).length === 0) throw badRequest(`${prefix || "body"} must change at least one field`);
	return out;
}

/** Collection rules such as "an email needs html or text", on the document as it will be stored. */
export function checkRules(col: CollectionDef, doc: Record<string, unknown>): void {
	for (const rule of col.rules ?? []) if (!rule.anyOf.some((f) => doc[f] !== undefined && doc[f] !== null && doc[f] !== "")) throw badRequest(rule.message);
}
