/**
 * Grant bodies (spec: Grant, Grant subjects, constraints) and the RBAC expansion of context/configs into virtual
 * grants. Pure: the grant engine in lib/grants.ts uses both.
 */
import { isIpOrCidr } from "./cidr";
import { badRequest } from "./errors";
import { GROUP_RULE, isGroupName } from "./validate";
import { MAX_TIME_WINDOWS, parseCron, type CompiledCron } from "./grant-time";
import { DOMAINS, findCollection, findDomain, type CollectionDef } from "../catalog";
import { checkField, neverQueried, parseQuery, referencedFields } from "./query-safety";
import type { Grant } from "./grants";

// ---------------------------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------------------------

const LABEL = "[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?";
const HOST_RE = new RegExp(`^${LABEL}(?:\\.${LABEL})*$`, "i");
const HEX24_RE = /^[0-9a-f]{24}$/i;
const ROLE_RE = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;
export const ACTION_RE = /^[a-z][a-z0-9_-]{0,31}$/;
export const OBJECT_RE = /^[a-z][a-z0-9-]{0,63}:(?:[a-z][a-z0-9-]{0,63}|\*)$/;
const MAX_LIST = 1000;

/**
 * Checks a grant subject. Forms: `@role@domain`, `<uid|aid|cid>@domain` (24-hex), `<username>@domain`, or a group
 * name (an email `team@example.com` or an FQDN `eng.example.com`) suffixed with `@domain`; the domain must be
 * registered. Any other name could never be one of a token's subjects.
 */
function validateSubject(subject: unknown, domains: Set<string>, who?: GrantAuthor): void {
	if (typeof subject !== "string" || !subject) throw badRequest("subject: is required and must be a string");
	if (subject.length > 320) throw badRequest("subject: is too long (max 320 characters)");
	if (/\s/.test(subject)) throw badRequest("subject: must not contain whitespace");
	const registered = (d: string) => domains.has(d.toLowerCase());
	const notRegistered = (d: string) =>
		badRequest(
			who?.operator
				? `subject: domain '${d}' is not registered`
				: who?.cid
					? `subject: domain '${d}' is not registered for client ${who.cid} (register it on that client, or grant as the operator)`
					: `subject: domain '${d}' is not registered for the client`,
		);
	if (subject.startsWith("@")) {
		const parts = subject.slice(1).split("@");
		if (parts.length === 1) throw badRequest(`subject: role '${subject}' needs a domain suffix (@role@domain)`);
		if (parts.length !== 2) throw badRequest(`subject: '${subject}' is not of the form @role@domain`);
		const [role, domain] = parts;
		if (!ROLE_RE.test(role)) throw badRequest(`subject: invalid role name '${role}'`);
		if (!registered(domain)) throw notRegistered(domain);
		return;
	}
	const at = subject.lastIndexOf("@");
	// Every grant subject carries a registered domain (docs/contracts.md "Tokens and sessions"): a bare group name could never match a token.
	if (at < 0) throw badRequest(`subject: '${subject}' needs a domain suffix (<name>@domain, @role@domain or <group>@domain)`);
	const local = subject.slice(0, at);
	const domain = subject.slice(at + 1);
	if (!local) throw badRequest(`subject: '${subject}' has an empty name before '@'`);
	if (!HOST_RE.test(domain)) throw badRequest(`subject: invalid domain '${domain}'`);
	if (registered(domain)) {
		if (HEX24_RE.test(local) || USERNAME_RE.test(local) || isGroupName(local)) return;
		throw badRequest(`subject: invalid name '${local}' before @${domain}: a 24-hex id, a username or ${GROUP_RULE}`);
	}
	throw notRegistered(domain);
}

/** A username (docs/contracts.md "Tenants"): never a 24-hex id, so it can never pose as a user, app or client id. */
export const USERNAME_RE = /^[a-z0-9][a-z0-9._-]{2,63}$/;

/** Why `username` is not a valid username, or null. */
export function usernameProblem(username: unknown): string | null {
	if (typeof username !== "string" || !USERNAME_RE.test(username)) return "username: must match ^[a-z0-9][a-z0-9._-]{2,63}$";
	if (HEX24_RE.test(username)) return "username: must not be a 24-hex id";
	return null;
}

/**
 * Why one entry of a user's `subjects` is invalid, or null. An entry is a role (`@editor`) or a group name (an email
 * `team@example.com` or an FQDN `eng.example.com`: lib/validate.ts `isGroupName`); the token adds `@<domain>`, so an
 * entry can never carry a domain of its own, whitespace (a token's subjects are space-separated), or a 24-hex id.
 */
export function userSubjectProblem(entry: unknown, where: string): string | null {
	if (typeof entry !== "string" || !entry) return `${where}: must be a non-empty string`;
	if (/\s/.test(entry)) return `${where}: must not contain whitespace`;
	if (HEX24_RE.test(entry) || HEX24_RE.test(entry.split("@")[0])) return `${where}: must not be a 24-hex id`;
	if (entry.startsWith("@")) return ROLE_RE.test(entry.slice(1)) ? null : `${where}: '${entry}' is not a role name (@name)`;
	if (isGroupName(entry)) return null;
	return `${where}: must be a role (@name) or ${GROUP_RULE}`;
}

/** What of a user its tokens' subjects come from (identity.users.byId answers it). */
export interface SubjectSource {
	id: string;
	username?: string;
	subjects?: string[];
}

/**
 * A user's subjects in `domain`: its roles and groups suffixed with the domain, `<uid>@domain`, `<username>@domain`;
 * and its groups (the entries without a leading `@`, for the `group` zone). Only well-formed entries count (stored
 * before validation existed, an entry could hold spaces or an id and pose as another principal). A token is minted
 * with them (services/auth/token-grants.ts) and decided with those of them its user still holds
 * (authority/authenticate.ts).
 */
export function userTokenSubjects(user: SubjectSource, domain: string): { subjects: string[]; groups: string[] } {
	const own = (user.subjects ?? []).filter((s, i) => userSubjectProblem(s, `subjects[${i}]`) === null);
	const named = user.username && usernameProblem(user.username) === null ? [`${user.username}@${domain}`] : [];
	return { subjects: [...own.map((s) => `${s}@${domain}`), `${user.id}@${domain}`, ...named], groups: own.filter((s) => !s.startsWith("@")) };
}

/** NIST SP 800-63B §5.1.1.2: a memorized secret chosen by its user has at least 8 characters. */
export const PASSWORD_MIN_LENGTH = 8;

/** Why `password` is too short, or null (counted in Unicode code points, as NIST counts characters). */
export function passwordProblem(password: unknown): string | null {
	if (typeof password !== "string" || [...password].length >= PASSWORD_MIN_LENGTH) return null;
	return `password must be at least ${PASSWORD_MIN_LENGTH} characters (NIST SP 800-63B)`;
}

function optionalList(body: Record<string, unknown>, key: string): unknown[] | null {
	const v = body[key];
	if (v === undefined || v === null) return null;
	if (!Array.isArray(v)) throw badRequest(`${key}: must be an array`);
	if (v.length > MAX_LIST) throw badRequest(`${key}: at most ${MAX_LIST} entries`);
	return v;
}

/** A cron expression of a time window: parsed into field tables (lib/grant-time.ts), its schedule never iterated. */
function validateCron(expr: unknown, where: string): void {
	if (typeof expr !== "string" || !expr.trim()) throw badRequest(`${where}: must be a cron expression`);
	const n = expr.trim().split(/\s+/).length;
	if (n !== 5 && n !== 6) throw badRequest(`${where}: a cron expression has 5 or 6 fields, got ${n}`);
	let parsed: CompiledCron;
	try {
		parsed = parseCron(expr);
	} catch (e) {
		throw badRequest(`${where}: invalid cron expression (${(e as Error).message})`);
	}
	if (!parsed.fires) throw badRequest(`${where}: cron expression never fires`);
}

/** The collections a grant object names: `service:collection`, or every collection of `service:*`. */
function grantCollections(object: string): CollectionDef[] {
	const [svc, col] = object.split(":");
	if (col === "*") return [...(findDomain(svc)?.collections ?? [])];
	const found = findCollection(svc, col);
	return found ? [found.collection] : [];
}

/** A grant object names a service of the catalog and one of its collections (or `*`): a typo would never match. */
function objectProblem(object: string): void {
	const [svc, col] = object.split(":");
	const d = findDomain(svc);
	if (!d) throw badRequest(`object: unknown service '${svc}' (services: ${DOMAINS.map((x) => x.name).join(", ")})`);
	if (col !== "*" && !d.collections.some((c) => c.name === col))
		throw badRequest(`object: '${object}' is not a collection (collections of ${svc}: ${d.collections.map((c) => c.name).join(", ")}; or ${svc}:* for all)`);
}

/**
 * Who writes a grant: a principal of client `cid` may name its client's domains; the operator (a root-client token)
 * any registered domain (docs/contracts.md "Tenants"). Only shapes the message; the caller passes the matching domains.
 */
export interface GrantAuthor {
	cid?: string;
	operator?: boolean;
}

/**
 * Validates a grant body (create or full replace). Throws ApiError 400 naming the offending field.
 * Keys other than the grant's own (common document fields) are left to the collection schema.
 */
export function validateGrant(body: unknown, registeredDomains: string[], who?: GrantAuthor): void {
	if (typeof body !== "object" || body === null || Array.isArray(body)) throw badRequest("grant: body must be an object");
	const b = body as Record<string, unknown>;
	const domains = new Set((registeredDomains ?? []).filter((d) => typeof d === "string").map((d) => d.toLowerCase()));
	validateSubject(b.subject, domains, who);

	if (typeof b.action !== "string" || !ACTION_RE.test(b.action)) throw badRequest("action: must be a lowercase action name (letter, then up to 31 of a-z 0-9 _ -)");
	if (typeof b.object !== "string" || !OBJECT_RE.test(b.object)) throw badRequest("object: must be 'service:collection' or 'service:*' (lowercase)");
	objectProblem(b.object);

	const fields = optionalList(b, "field");
	fields?.forEach((f, i) => {
		if (typeof f !== "string" || f.length > 256) throw badRequest(`field[${i}]: must be a field path`);
		try {
			checkField(f);
		} catch (e) {
			throw badRequest(`field[${i}]: ${(e as Error).message}`);
		}
	});

	const filters = optionalList(b, "filter");
	filters?.forEach((f, i) => {
		if (typeof f !== "string") throw badRequest(`filter[${i}]: must be a JSON text`);
		let parsed: unknown;
		try {
			parsed = JSON.parse(f);
		} catch {
			throw badRequest(`filter[${i}]: is not valid JSON`);
		}
		if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw badRequest(`filter[${i}]: must be a JSON object`);
		let query: Record<string, unknown>;
		try {
			query = parseQuery(parsed);
		} catch (e) {
			throw badRequest(`filter[${i}]: ${(e as Error).message}`);
		}
		// Write-only and internal fields are never queried, not even by a grant (docs/contracts.md "Fields that are never queried").
		const bad = referencedFields(query).find((f) => grantCollections(b.object as string).some((c) => neverQueried(c, f)));
		if (bad !== undefined) throw badRequest(`filter[${i}]: query field ${bad} is not allowed`);
	});

	const locations = optionalList(b, "location");
	locations?.forEach((l, i) => {
		if (typeof l !== "string" || !isIpOrCidr(l)) throw badRequest(`location[${i}]: must be an IP address or CIDR range`);
	});

	const times = optionalList(b, "time");
	if (times && times.length > MAX_TIME_WINDOWS) throw badRequest(`time: at most ${MAX_TIME_WINDOWS} windows per grant (got ${times.length})`);
	times?.forEach((t, i) => {
		if (typeof t !== "object" || t === null || Array.isArray(t)) throw badRequest(`time[${i}]: must be an object { cron_exp, duration }`);
		const w = t as Record<string, unknown>;
		validateCron(w.cron_exp, `time[${i}].cron_exp`);
		if (typeof w.duration !== "number" || !Number.isSafeInteger(w.duration) || w.duration <= 0) throw badRequest(`time[${i}].duration: must be an integer number of seconds > 0`);
	});
}

// ---------------------------------------------------------------------------------------------------------
// RBAC expansion
// ---------------------------------------------------------------------------------------------------------

export interface RbacEntry {
	domain: string;
	roles: Record<string, string[]>;
	permissions: Record<string, string[]>;
}

const EXPANSION_RE = /^([a-z][a-z0-9_-]{0,31}):([a-z][a-z0-9-]{0,63}):([a-z][a-z0-9-]{0,63}|\*)$/;
const own = (o: object, k: string) => Object.prototype.hasOwnProperty.call(o, k);
const isMap = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const RBAC_KEYS = ["domain", "roles", "permissions"];

/**
 * Validates the value of an RBAC config (spec: an array of `{ domain, roles, permissions }`, `roles` mapping a role to
 * permission names, `permissions` a permission name to grant expansions). What `expandRbac` would skip silently is a
 * 400 naming its place here, so a configuration never stores a role that can never apply.
 */
export function validateRbac(value: unknown): void {
	const shape = "an array of { domain, roles: { <role>: [<permission>] }, permissions: { <permission>: [<action>:<service>:<collection>] } }";
	if (!Array.isArray(value)) throw badRequest(`value of an RBAC config must be ${shape}`);
	value.forEach((entry, i) => {
		const at = `value[${i}]`;
		if (!isMap(entry)) throw badRequest(`${at} must be an object { domain, roles, permissions }`);
		const extra = Object.keys(entry).find((k) => !RBAC_KEYS.includes(k));
		if (extra !== undefined) throw badRequest(`${at}.${extra} is not a field of an RBAC entry (domain, roles, permissions)`);
		if (typeof entry.domain !== "string" || !HOST_RE.test(entry.domain)) throw badRequest(`${at}.domain must be a domain name of the client`);
		if (!isMap(entry.permissions)) throw badRequest(`${at}.permissions must be an object mapping a permission name to grant expansions`);
		const permissions = entry.permissions;
		for (const [name, expansions] of Object.entries(permissions)) {
			if (!Array.isArray(expansions)) throw badRequest(`${at}.permissions.${name} must be an array of <action>:<service>:<collection> (or <action>:<service>:*)`);
			expansions.forEach((x, j) => {
				if (typeof x !== "string" || !EXPANSION_RE.test(x)) throw badRequest(`${at}.permissions.${name}[${j}] must be <action>:<service>:<collection> or <action>:<service>:*`);
				try {
					objectProblem(x.slice(x.indexOf(":") + 1));
				} catch (e) {
					throw badRequest(`${at}.permissions.${name}[${j}]: ${(e as Error).message.replace(/^object: /, "")}`);
				}
			});
		}
		if (!isMap(entry.roles)) throw badRequest(`${at}.roles must be an object mapping a role to permission names`);
		for (const [role, names] of Object.entries(entry.roles)) {
			if (!ROLE_RE.test(role.startsWith("@") ? role.slice(1) : role)) throw badRequest(`${at}.roles: '${role}' is not a role name`);
			if (!Array.isArray(names)) throw badRequest(`${at}.roles.${role} must be an array of permission names`);
			names.forEach((n, j) => {
				if (typeof n !== "string" || !own(permissions, n)) throw badRequest(`${at}.roles.${role}[${j}] must name a permission of ${at}.permissions`);
			});
		}
	});
}

/**
 * Expands RBAC configuration values (arrays of `{ domain, roles, permissions }`; one value or several
 * concatenated) into virtual grants with subject `@role@domain`. Role keys may carry the leading `@` or
 * not. Malformed entries, unknown permission names and expansion strings that are not
 * `action:service:collection` / `action:service:*` are skipped; duplicates are emitted once.
 */
export function expandRbac(configs: unknown): Grant[] {
	const out: Grant[] = [];
	const seen = new Set<string>();
	const entries = Array.isArray(configs) ? configs : [];
	for (const entry of entries) {
		if (typeof entry !== "object" || entry === null) continue;
		const { domain, roles, permissions } = entry as Partial<RbacEntry>;
		if (typeof domain !== "string" || !domain || typeof roles !== "object" || roles === null) continue;
		if (typeof permissions !== "object" || permissions === null) continue;
		for (const roleKey of Object.keys(roles)) {
			const role = roleKey.startsWith("@") ? roleKey.slice(1) : roleKey;
			if (!role) continue;
			const permNames = roles[roleKey];
			if (!Array.isArray(permNames)) continue;
			for (const perm of permNames) {
				if (typeof perm !== "string" || !own(permissions, perm)) continue;
				const expansions = permissions[perm];
				if (!Array.isArray(expansions)) continue;
				for (const exp of expansions) {
					const m = typeof exp === "string" ? EXPANSION_RE.exec(exp) : null;
					if (!m) continue;
					const subject = `@${role}@${domain}`;
					const grant: Grant = { subject, action: m[1], object: `${m[2]}:${m[3]}` };
					const key = `${subject}\n${grant.action}\n${grant.object}`;
					if (seen.has(key)) continue;
					seen.add(key);
					out.push(grant);
				}
			}
		}
	}
	return out;
}
