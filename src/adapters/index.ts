// The adapters as pgfence's own tools see them (the bench): each data layer's surface, loaded on demand so
// that no library is loaded before it is asked for (each is an optional peer). Users import pgfence/<name>.
export const adapterSurfaces = {
  kysely: () => import('./kysely/api.js'),
  postgres: () => import('./postgres/api.js'),
  prisma: () => import('./prisma/api.js'),
  drizzle: () => import('./drizzle/api.js'),
  typeorm: () => import('./typeorm/api.js'),
  knex: () => import('./knex/api.js'),
};
