/** The schemas of the spec's own tables (tokens, grants, errors, change events...), not derived from a collection. */
import { SCOPE_PATTERN } from "../oauth-form";
import { GRANT_TYPES } from "../../catalog/domains/domain";
import { ref, type Schema, str, strList } from "./common";

export const SPEC_SCHEMAS: Record<string, Schema> = {
	Error: {
		type: "object",
		description: "Body of every error response.",
		required: ["statusCode", "message", "error"],
		properties: {
			statusCode: { type: "integer", description: "HTTP status code" },
			message: str("What went wrong; for invalid input it names the offending field"),
			error: str("HTTP status name, e.g. `Bad Request`"),
		},
	},
	TokenRequest: {
		type: "object",
		description:
			"JSON body of POST /auth/token. The client's credentials (`client_id`, `client_secret`) come in the body or in `Authorization: Basic` (security scheme `clientBasic`), not both; " +
			"without either the answer is 400 `client_id is required`.",
		required: ["grant_type"],
		properties: {
			grant_type: { type: "string", enum: [...GRANT_TYPES, "client_credentials"], description: "`client_credentials` (RFC 6749 §4.4) is an alias of `client_credential`" },
			client_id: str("Required on every grant: here, or as the user name of `Authorization: Basic`"),
			client_secret: str("Required for `client_credential`: here, or as the password of `Authorization: Basic` (not both)"),
			app_id: str("Id of an app of the client (domain/apps): the token carries `aid` and the app's scopes"),
			username: str("Username, email or phone (password grant)"),
			password: str("Password or one-time code (password grant)"),
			refresh_token: str("For the `refresh_token` grant; single-use"),
			code: str("For the `authorization_code` grant"),
			response_type: str("Optional"),
			state: str("Optional"),
			strict: { type: "boolean", description: "If true the issued token carries `strict: true` and every request with it needs `x-api-key`" },
			domain: str("Optional tenant domain"),
			scopes: {
				type: "array",
				items: { type: "string", pattern: SCOPE_PATTERN },
				description: "Restrict the token to a subset of the allowed scopes: `<action>:<service>[:<collection>]` of an existing service and collection, or `whole` (400 otherwise)",
			},
			subjects: strList("Override ABAC subjects"),
			coworkers: strList("Additional coworker client ids"),
			source: str("Optional"),
		},
		// The per-grant requirements of the spec's "Grant types" table, so a validating client catches them early.
		allOf: [
			{ if: { properties: { grant_type: { const: "password" } }, required: ["grant_type"] }, then: { required: ["username", "password"] } },
			{ if: { properties: { grant_type: { const: "refresh_token" } }, required: ["grant_type"] }, then: { required: ["refresh_token"] } },
			{ if: { properties: { grant_type: { const: "authorization_code" } }, required: ["grant_type"] }, then: { required: ["code"] } },
		],
	},
	TokenResponse: {
		type: "object",
		required: ["token_type", "access_token", "expires_in", "scope"],
		properties: {
			token_type: { type: "string", const: "Bearer", description: "Always `Bearer`" },
			access_token: str("JWT for the Authorization header"),
			refresh_token: str("Present when the grant supports session rotation; absent for `client_credential`"),
			expires_in: { type: "integer", description: "Seconds until the access token expires" },
			scope: str("Space-separated scopes actually granted (may be narrower than requested)"),
			domain: str("Tenant domain of the session"),
			subject: str("ABAC subject string embedded in the token"),
			coworker: str("Space-separated coworker client ids, if any"),
			session: str("Session record id, present only on some grants"),
		},
	},
	TokenClaims: {
		type: "object",
		required: ["type", "strict", "cid", "scope", "domain", "subject", "session", "client_id"],
		properties: {
			type: { type: "string", enum: ["access", "refresh"], description: "Access tokens call APIs; refresh tokens cannot" },
			strict: { type: "boolean", description: "Requires the `x-api-key` header" },
			cid: str("Client id owning the session"),
			aid: str("App id"),
			uid: str("Authenticated user id"),
			scope: str("Space-separated scopes"),
			domain: str("Tenant domain"),
			subject: str("Space-separated ABAC subjects"),
			tz: str("Timezone name"),
			lang: str("Language code"),
			session: str("Session record id (used for logout and blacklisting)"),
			client_id: str("OAuth client id (equals `cid` in most flows)"),
			coworker: str("Space-separated coworker client ids"),
			iat: { type: "integer", description: "Issued at (Unix seconds)" },
			exp: { type: "integer", description: "Expires at (Unix seconds)" },
		},
	},
	TotpCheck: {
		type: "object",
		description: "Body of POST /auth/check: checks a TOTP code (RFC 6238), not a JWT.",
		required: ["secret", "token"],
		properties: {
			secret: str("TOTP hex secret, AES-encrypted then base64-encoded"),
			token: { type: "string", pattern: "^[0-9]{6}$", description: "The 6-digit code" },
			period: { type: "integer", minimum: 1, default: 30, description: "Seconds" },
			window: { type: "integer", minimum: 0, default: 1, description: "Accepted drift, in periods, either direction" },
		},
	},
	Policy: {
		type: "object",
		required: ["subject", "action", "object"],
		properties: {
			subject: str("The grant's subject (see Grant)"),
			action: str("The grant's action"),
			object: str("The grant's object"),
			field: { type: ["array", "null"], items: { type: "string" }, description: "The grant's field allowlist; null: all fields" },
			filter: { type: ["array", "null"], items: { type: "string" }, description: "The grant's row filters; null: none" },
			location: strList("The grant's IP/CIDR allowlist"),
		},
	},
	CanRequest: {
		type: "object",
		description: "Body of POST /auth/can.",
		required: ["action", "object"],
		properties: {
			action: str("`read`, `write`, `manage` or a special/custom action"),
			object: str("`service:collection`"),
			fields: strList("Optional field-level check"),
			filter: { type: "object", description: "Optional filter context" },
			subjects: strList("Override; default is the token's subject"),
			strict: { type: "string", enum: ["obj"], description: "`obj`: exact object match, no `service:*` fallback" },
			tz: str("Timezone for time-based grants"),
			ip: str("IP for location-based grants"),
		},
	},
	LoginBlock: {
		type: "object",
		description: "A failed-login counter that reached its limit and blocks (429) until `until`.",
		required: ["id", "counter", "client", "ip", "failures", "limit", "until"],
		properties: {
			id: { type: "string", description: "The block's id in DELETE /auth/login-blocks/{id}", example: "acct:65f1c0a2b3c4d5e6f7a8b9c1:user.65f1c0a2b3c4d5e6f7a8b9c0:203.0.113.7" },
			counter: {
				type: "string",
				enum: ["account", "ip"],
				description: "`account`: one account's failures from `ip` (limit 10); `ip`: every failure through the client from `ip` (limit 100)",
			},
			client: { type: ["string", "null"], description: "The client (tenant) the failures went through; null for client_ids that name no client" },
			account: {
				type: "string",
				enum: ["user", "login", "secret", "code"],
				description: "What was guessed: a user's password (`user`; `login`: a login naming no user), the client's secret, its authorization codes",
			},
			user: { type: "string", description: "The user whose password was guessed (account `user`)" },
			ip: { type: "string", description: "The address the failed logins came from", example: "203.0.113.7" },
			failures: { type: "integer", minimum: 1, description: "Failed logins counted in the window", example: 10 },
			limit: { type: "integer", minimum: 1, description: "The count that blocks: 10 for an account, 100 for every account of the client", example: 10 },
			until: { type: "string", format: "date-time", description: "When the block ends by itself" },
		},
	},
	CanResponse: {
		type: "object",
		required: ["granted"],
		properties: {
			granted: { type: "boolean", description: "With `fields`, a partial result is false plus denied_fields and allowed_fields" },
			policies: { type: "array", items: ref("schemas", "Policy"), description: "With header `x-can-with-policies`" },
			denied_fields: strList("With `fields`: the requested fields no grant allows"),
			allowed_fields: strList("With `fields`: the requested fields a grant allows"),
		},
	},
	ApiToken: {
		type: "object",
		description: "Plaintext of the `x-api-key` header. The header value is its JSON, AES-256-GCM encrypted: " + '`base64url(iv) + "." + base64url(ciphertext ‖ tag)`.',
		required: ["cid", "client_id", "expiration_date"],
		properties: {
			cid: str("Must equal the token's `cid`"),
			client_id: str("Must equal the token's `client_id`"),
			whitelist: strList("CIDR ranges or single IPs; empty or absent means no restriction"),
			expiration_date: {
				anyOf: [
					{ type: "string", format: "date-time" },
					{ type: "integer", description: "Unix milliseconds" },
				],
				description: "Must be in the future",
			},
		},
	},
	GrantTime: {
		type: "object",
		required: ["cron_exp", "duration"],
		properties: {
			cron_exp: str("Opens the window"),
			duration: { type: "number", minimum: 0, description: "Seconds the window stays open" },
		},
	},
	Grant: {
		type: "object",
		description: "An attribute-based access grant (collection auth/grants).",
		required: ["subject", "action", "object"],
		properties: {
			subject: str(
				"Always with a domain the caller's client registers (the operator: any registered domain): `@role@domain` (users carrying the role), " +
					"`<uid|aid|cid>@domain` (one user, app or client; a client's own identity is `<cid>@<domain>`), `<username>@domain`, or a group `<group>@domain`",
			),
			action: str("`read`, `write`, `manage` or a special/custom action"),
			object: str("`service:collection` or `service:*`"),
			field: strList("Field allowlist"),
			filter: strList("Row-level filters: JSON texts in document-store query notation; `{{token.<claim>}}` is replaced by the caller's claim"),
			location: strList("IP/CIDR allowlist"),
			time: { type: "array", items: ref("schemas", "GrantTime"), description: "Access windows; several combine with OR" },
		},
	},
	ChangeEvent: {
		type: "object",
		description: "Change event pushed to a client's CQRS webhook after each write.",
		required: ["id", "ts_ms", "op", "topic", "source"],
		properties: {
			id: str("Document id"),
			ts_ms: { type: "integer", description: "Timestamp in milliseconds" },
			op: { type: "string", enum: ["c", "u", "d", "r"], description: "create, update, delete, restore" },
			topic: str("`{db}.{collection}`"),
			source: {
				type: "object",
				required: ["name", "db", "collection"],
				description: "Where the change happened",
				properties: { name: str("Platform name"), db: str("Service"), collection: str("Collection") },
			},
			after: { type: "object", description: "State after the operation; absent on delete" },
			before: { type: "object", description: "State before the operation; absent on create" },
		},
	},
};

/**
 * The token request as a form (RFC 6749, lib/oauth-form.ts): every value a string; `scope` (or `scopes`),
 * `subjects` and `coworkers` space-delimited words, or the key repeated; `strict` `true` or `false`. Derived from
 * TokenRequest so the two name the same fields.
 */
SPEC_SCHEMAS.TokenForm = (() => {
	const json = SPEC_SCHEMAS.TokenRequest as { properties: Record<string, Schema>; required: string[] };
	const properties: Record<string, Schema> = {};
	for (const [k, p] of Object.entries(json.properties)) {
		const description = p.description as string | undefined;
		if (p.type === "array")
			properties[k] = { anyOf: [{ type: "string" }, { type: "array", items: { type: "string" } }], description: `${description ?? k}; space-delimited words, or the key repeated` };
		else if (p.type === "boolean") properties[k] = { type: "string", enum: ["true", "false"], description };
		else properties[k] = { type: "string", ...(p.enum ? { enum: p.enum } : {}), description };
	}
	properties.scope = { type: "string", description: "Space-delimited scopes (RFC 6749 §3.3), as `scopes`; give one of the two" };
	return {
		type: "object",
		description:
			"Form body of POST /auth/token (`application/x-www-form-urlencoded`), as OAuth 2.0 clients send it. The client's credentials in the form or in `Authorization: Basic`, not both. Any other key given twice answers 400 (RFC 6749 §3.2).",
		required: json.required,
		properties,
	};
})();
