import type { DomainDef } from "../types";

export const general: DomainDef = {
	name: "general",
	restPort: 3070,
	grpcPort: 5070,
	description: "Activities, artifacts, comments, events and workflows",
	collections: [
		{ name: "activities", description: "Audit log entries", fields: { action: { type: "string", required: true, maxLength: 200 }, subject: { type: "string" }, data: { type: "object" } } },
		{ name: "artifacts", description: "Artifacts", fields: { name: { type: "string", required: true, maxLength: 200 }, content: { type: "any" } } },
		{ name: "comments", description: "Comments", fields: { content: { type: "string", required: true, maxLength: 20000 }, target: { type: "string" } } },
		{ name: "events", description: "Calendar events", fields: { title: { type: "string", required: true, maxLength: 500 }, start_at: { type: "date" }, end_at: { type: "date" } } },
		{ name: "workflows", description: "Workflows", fields: { name: { type: "string", required: true, maxLength: 200 }, steps: { type: "array", items: "object" } } },
	],
};
