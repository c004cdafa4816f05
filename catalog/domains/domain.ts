import type { DomainDef } from "../types";

export const GRANT_TYPES = ["password", "refresh_token", "client_credential", "authorization_code"] as const;
const STATUS = ["ACTIVE", "INACTIVE"] as const;

export const domain: DomainDef = {
	name: "domain",
	restPort: 3030,
	grpcPort: 5030,
	description: "OAuth applications and clients",
	collections: [
		{
			name: "apps",
			description: "Applications acting under a client",
			fields: {
				name: { type: "string", required: true, maxLength: 200 },
				client: { type: "string", format: "objectId", relation: "domain/clients" },
				scopes: { type: "array", items: "string" },
				status: { type: "string", enum: STATUS },
			},
		},
		{
			name: "clients",
			description: "OAuth clients (tenants)",
			fields: {
				name: { type: "string", required: true, maxLength: 200 },
				secret: { type: "string", writeOnly: true, maxLength: 200, description: "client_secret; generated and returned once when not given" },
				scopes: { type: "array", items: "string" },
				domains: { type: "array", items: "string", required: true, description: "Domain names; the first is the default" },
				grant_types: { type: "array", items: "string", enum: GRANT_TYPES },
				coworkers: { type: "array", items: "string" },
				access_token_ttl: { type: "integer", minimum: 1 },
				refresh_token_ttl: { type: "integer", minimum: 1 },
				status: { type: "string", enum: STATUS },
				operator: { type: "boolean", internal: true, description: "True for the seeded root client only: the operator's tenant" },
			},
		},
	],
};
