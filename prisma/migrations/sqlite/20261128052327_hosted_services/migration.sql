-- CreateTable
CREATE TABLE "HostedService" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "accountId" TEXT NOT NULL,
    "instanceId" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "port" INTEGER NOT NULL,
    "description" TEXT NOT NULL DEFAULT '',
    "key" TEXT NOT NULL,
    "access" TEXT NOT NULL DEFAULT 'account',
    "bytesIn" BIGINT NOT NULL DEFAULT 0,
    "bytesOut" BIGINT NOT NULL DEFAULT 0,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "HostedService_accountId_fkey" FOREIGN KEY ("accountId") REFERENCES "Account" ("id") ON DELETE CASCADE ON UPDATE CASCADE,
    CONSTRAINT "HostedService_instanceId_fkey" FOREIGN KEY ("instanceId") REFERENCES "Instance" ("id") ON DELETE CASCADE ON UPDATE CASCADE
);

-- CreateIndex
CREATE UNIQUE INDEX "HostedService_key_key" ON "HostedService"("key");

-- CreateIndex
CREATE INDEX "HostedService_accountId_idx" ON "HostedService"("accountId");

-- CreateIndex
CREATE UNIQUE INDEX "HostedService_instanceId_name_key" ON "HostedService"("instanceId", "name");
