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
				eid: { type: "string", required: true, description: "Id of the owning client" },
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
