import type { DomainDef } from "../types";

export const context: DomainDef = {
	name: "context",
	restPort: 3040,
	grpcPort: 5040,
	description: "Application configuration and preferences",
	collections: [
		{
			name: "configs",
			description: "Configuration entries (CQRS webhooks, RBAC roles, ...)",
			fields: {
				key: { type: "string", required: true, maxLength: 100, description: "CQRS, RBAC or an application key" },
				// Not required: omitted, the caller's client is filled in (CONTRACTS.md "Tenants").
				eid: { type: "string", description: "Id of the owning client: the caller's client (filled in when omitted); another client's only for the operator" },
				value: { type: "any", required: true, description: "Object or array" },
			},
		},
		{
			name: "settings",
			description: "User or tenant preferences",
			fields: {
				key: { type: "string", required: true, maxLength: 100 },
				value: { type: "any" },
			},
		},
	],
};
