import type { DomainDef } from "../types";

export const logistic: DomainDef = {
	name: "logistic",
	restPort: 3120,
	grpcPort: 5120,
	description: "Locations, drivers, vehicles, travels and cargoes",
	collections: [
		{
			name: "locations",
			description: "Places",
			fields: { name: { type: "string", required: true, maxLength: 500 }, lat: { type: "number" }, lng: { type: "number" }, address: { type: "string" } },
			specials: [
				{
					action: "resolve",
					method: "POST",
					path: "resolve",
					implemented: true,
					description:
						"`{ lat, lng }`: the nearest location of the caller's view that has coordinates, with `distance` in metres (great circle); `{ query }`: the location of the caller's view whose text best matches, with `score`. Coordinates outside lat ±90 / lng ±180 answer 400; nothing found, 404",
					listParams: true,
					body: {
						lat: { type: "number", description: "Latitude, -90..90 (with `lng`)" },
						lng: { type: "number", description: "Longitude, -180..180 (with `lat`)" },
						query: { type: "string", maxLength: 200, description: "Text to match instead of a point" },
					},
					answer: "data",
					answerFields: {
						distance: { type: "number", description: "Metres from the given point (`{ lat, lng }` form)" },
						score: { type: "number", description: "Relevance (`{ query }` form)" },
					},
					errors: [404],
				},
			],
		},
		{ name: "drivers", description: "Drivers", fields: { name: { type: "string", required: true, maxLength: 200 }, license: { type: "string" } } },
		{ name: "vehicles", description: "Vehicles", fields: { name: { type: "string", required: true, maxLength: 200 }, plate: { type: "string", maxLength: 50 } } },
		{
			name: "travels",
			description: "Travels",
			fields: {
				origin: { type: "string", format: "objectId", relation: "logistic/locations" },
				destination: { type: "string", format: "objectId", relation: "logistic/locations" },
				driver: { type: "string", format: "objectId", relation: "logistic/drivers" },
				vehicle: { type: "string", format: "objectId", relation: "logistic/vehicles" },
				status: { type: "string", enum: ["PLANNED", "ONGOING", "DONE", "CANCELLED"] },
			},
			specials: [
				{
					action: "resolve",
					method: "POST",
					path: "resolve",
					implemented: true,
					description:
						"Distance, duration and path between two points, each a location id of the caller's view (read on logistic/locations; 404 otherwise) or `{ lat, lng }`: great-circle metres, seconds at `speed_kmh` (default 50). Coordinates outside lat ±90 / lng ±180 answer 400",
					body: {
						origin: { type: "any", required: true, description: "A location id, or `{ lat, lng }`" },
						destination: { type: "any", required: true, description: "A location id, or `{ lat, lng }`" },
						speed_kmh: { type: "number", description: "Average speed in km/h, above 0 (default 50)" },
					},
					answer: "data:object",
					answerFields: {
						distance: { type: "number", description: "Great-circle distance in metres" },
						duration: { type: "integer", description: "Seconds at `speed_kmh`" },
						path: { type: "array", items: "object", description: "The two points `[{ lat, lng }, { lat, lng }]`" },
					},
					errors: [404],
				},
			],
		},
		{
			name: "cargoes",
			description: "Cargoes",
			fields: {
				name: { type: "string", required: true, maxLength: 200 },
				weight: { type: "number" },
				travel: { type: "string", format: "objectId", relation: "logistic/travels" },
			},
		},
	],
};
