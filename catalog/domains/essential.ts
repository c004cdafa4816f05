import type { DomainDef } from "../types";

export const SAGA_STATES = ["AWAITING", "ABORTED", "COMMITTED"] as const;
export const SAGA_STAGE_ACTIONS = [
	"COUNT_DOCUMENTS",
	"INSERT_MANY",
	"FIND_ONE",
	"FIND",
	"FIND_ONE_AND_UPDATE",
	"FIND_ONE_AND_DELETE",
	"UPDATE_MANY",
] as const;

export const essential: DomainDef = {
	name: "essential",
	restPort: 3050,
	grpcPort: 5050,
	description: "Sagas coordinating multi-service operations",
	collections: [
		{
			name: "sagas",
			description: "Saga instances",
			fields: {
				ttl: { type: "integer", required: true, minimum: 1, description: "Lifetime in seconds" },
				job: { type: "string", required: true, format: "uuid" },
				state: { type: "string", required: true, enum: SAGA_STATES },
				session: { type: "string", required: true, format: "hex" },
			},
			specials: [
				{ action: "start", method: "POST", path: "start", description: "Start a saga" },
				{ action: "start", method: "POST", path: "add", description: "Append a stage to an in-flight saga" },
				{ action: "abort", method: "GET", path: ":id/abort", description: "Abort a saga" },
				{ action: "commit", method: "GET", path: ":id/commit", description: "Commit a saga" },
			],
		},
		{
			name: "saga-stages",
			description: "Saga steps",
			fields: {
				saga: { type: "string", required: true, format: "objectId", relation: "essential/sagas" },
				bucket: { type: "string", required: true, description: "Target collection `service/collection`; its enum is filled from the catalog in catalog/index.ts" },
				action: { type: "string", required: true, enum: SAGA_STAGE_ACTIONS },
				req: { type: "object", required: true },
			},
		},
	],
};
