/** The operations of the routes outside the catalog's collections: tokens, logout, TOTP, grant checks, file downloads. */
import { STATUS_NAMES } from "../errors";
import { json, ref } from "./common";
import { envelope, ok, type OpParts } from "./op-parts";

export const AUTH_OPS: Record<string, () => OpParts> = {
	"special.files.download": () => {
		const binary = { "*/*": { schema: { type: "string", format: "binary" } } };
		const headers = {
			ETag: { description: "The content's SHA-256 (quoted hex)", schema: { type: "string" } },
			"Content-Disposition": {
				description: "`inline` for images, PDF, plain text, audio and video, else `attachment`; `filename` and RFC 5987 `filename*`",
				schema: { type: "string" },
			},
			"Accept-Ranges": { schema: { type: "string", enum: ["bytes"] } },
		};
		return {
			description:
				"The file's content with its mimetype, `Content-Length`, `ETag` and `Content-Disposition` (and `X-Content-Type-Options: nosniff`), when the request carries a valid share `key` or a bearer (header, `token` query parameter or `authorization` cookie) whose `download` view (scope `download:special:files` and a `download` grant) or `read` view holds the file. Anything else (no key, an expired or revoked key, a bearer that may not read it, a soft-deleted or unknown file) answers 404, never 401 or 403. `If-None-Match` with the etag answers 304.",
			parameters: ["id", "shareKey", "token", "range"],
			responses: {
				"200": { description: "The whole content", headers, content: binary },
				"206": { description: "The requested range, with `Content-Range`", headers, content: binary },
				"304": { description: "Not modified (`If-None-Match` matched the etag)" },
			},
			errors: [404, 416],
		};
	},
	"auth.token": () => ({
		// Public, and a client may authenticate itself with HTTP Basic instead of `client_secret` (RFC 6749 §2.3.1).
		security: [{}, { clientBasic: [] }],
		description:
			"Grant types: `password` (username, password, client_id), `refresh_token` (refresh_token, client_id; the refresh token is single-use), `client_credential` (client_id, client_secret; no refresh token), `authorization_code` (code, client_id).",
		requestBody: {
			required: true,
			description:
				"JSON, or `application/x-www-form-urlencoded` as OAuth 2.0 clients send it (RFC 6749): `scope` space-delimited, client credentials also in `Authorization: Basic`.",
			content: { ...json(ref("schemas", "TokenRequest")), "application/x-www-form-urlencoded": { schema: ref("schemas", "TokenForm") } },
		},
		responses: ok("Issued tokens", envelope.data(ref("schemas", "TokenResponse"))),
		errors: [400, 401, 413, 429],
		errorOverrides: {
			401: {
				description:
					"Wrong credentials (`username or password is invalid`; a wrong client secret: `client secret is invalid for client <client_id>`), or an unknown or expired refresh token. " +
					"A refresh token presented a second time revokes its whole session: every token of it answers 401.",
				content: { "application/json": { schema: ref("schemas", "Error"), example: { statusCode: 401, message: "username or password is invalid", error: STATUS_NAMES[401] } } },
			},
		},
	}),
	"auth.verify": () => ({ responses: ok("Claims of the bearer token (JWT or APT)", envelope.data(ref("schemas", "TokenClaims"))), errors: [401, 403] }),
	"auth.logout": () => ({
		description:
			"Deletes the session and blacklists it: every JWT or APT of the session then answers 401, on every gateway. Repeating it answers OK. " +
			"`GET` and `POST` do the same; `POST` takes no body (400 `POST /auth/logout takes no body: ...` otherwise).",
		responses: ok("Session ended", envelope.result(["OK"])),
		errors: [401, 403],
	}),
	"auth.loginBlocks": () => ({
		description:
			"The failed-login blocks in force, newest first (at most 1000; `total` counts them all). The operator (a root-client token) sees every tenant's blocks; " +
			"anyone else (a tenant admin: a `manage` grant on `identity:users`) those counted on its own client only.",
		inlineParameters: ["client", "user", "ip"].map((name) => ({
			name,
			in: "query",
			required: false,
			description: `Only the blocks of this ${name} (exact)`,
			schema: { type: "string", maxLength: 100 },
		})),
		responses: ok("Blocks in force", envelope.items(ref("schemas", "LoginBlock"))),
		errors: [400, 401, 403],
	}),
	"auth.loginUnblock": () => ({
		description:
			"Lifts a failed-login block: its counter starts again from nothing. The operator lifts any block, anyone else those of its own client; another tenant's block, or none, answers 404.",
		inlineParameters: [{ name: "id", in: "path", required: true, description: "The block's `id` from GET /auth/login-blocks", schema: { type: "string" } }],
		responses: ok("Lifted", envelope.result(["OK"])),
		errors: [400, 401, 403, 404],
	}),
	"auth.check": () => ({
		requestBody: { required: true, content: json(ref("schemas", "TotpCheck")) },
		responses: ok("`OK` if the code matches within the window, otherwise `NOK`", envelope.result(["OK", "NOK"])),
		errors: [400, 401, 403, 413],
	}),
	"auth.can": () => ({
		parameters: ["xCanWithPolicies", "xCanWithIdPolicies"],
		requestBody: { required: true, content: json(ref("schemas", "CanRequest")) },
		responses: ok("Grant decision", envelope.data(ref("schemas", "CanResponse"))),
		errors: [400, 401, 403, 413],
	}),
};
