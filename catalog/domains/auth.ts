import type { DomainDef } from "../types";

export const auth: DomainDef = {
	name: "auth",
	restPort: 3020,
	grpcPort: 5020,
	description: "Tokens, personal tokens (APTs) and ABAC grants",
	collections: [
		{
			name: "apts",
			description: "Long-lived revocable personal access tokens",
			fields: {
				name: { type: "string", required: true, maxLength: 200 },
				token: { type: "string", internal: true, description: "SHA-256 of the APT; the token itself is returned only on creation" },
				claims: { type: "object", internal: true, description: "Claims the APT carries" },
				scopes: { type: "array", items: "string" },
				subjects: { type: "array", items: "string" },
				strict: { type: "boolean" },
				expires_at: { type: "number", description: "Unix milliseconds" },
				coworkers: { type: "array", items: "string" },
				session: { type: "string", internal: true, description: "The APT's own session" },
			},
		},
		{
			name: "grants",
			description: "Attribute-based access grants",
			fields: {
				subject: { type: "string", required: true },
				action: { type: "string", required: true },
				object: { type: "string", required: true },
				field: { type: "array", items: "string" },
				filter: { type: "array", items: "string" },
				location: { type: "array", items: "string", format: "ip-or-cidr" },
				time: { type: "array", items: "object", description: "{ cron_exp, duration } windows" },
			},
		},
	],
};
