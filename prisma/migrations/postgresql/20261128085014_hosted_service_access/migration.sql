-- AlterTable
ALTER TABLE "EnvironmentVersion" ADD COLUMN     "services" JSONB NOT NULL DEFAULT '[]';

-- AlterTable
ALTER TABLE "HostedService" ADD COLUMN     "idleStopMinutes" INTEGER,
ADD COLUMN     "lastRequestAt" TIMESTAMP(3),
ADD COLUMN     "lastStatus" TEXT,
ADD COLUMN     "wakeOnRequest" BOOLEAN NOT NULL DEFAULT false;

-- CreateTable
CREATE TABLE "ServiceCredential" (
    "id" TEXT NOT NULL,
    "serviceId" TEXT NOT NULL,
    "accountId" TEXT NOT NULL,
    "kind" TEXT NOT NULL,
    "tokenHash" TEXT NOT NULL,
    "returnTo" TEXT NOT NULL DEFAULT '/',
    "sessionId" TEXT,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "expiresAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "ServiceCredential_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE UNIQUE INDEX "ServiceCredential_tokenHash_key" ON "ServiceCredential"("tokenHash");

-- CreateIndex
CREATE INDEX "ServiceCredential_accountId_idx" ON "ServiceCredential"("accountId");

-- CreateIndex
CREATE INDEX "ServiceCredential_sessionId_idx" ON "ServiceCredential"("sessionId");

-- CreateIndex
CREATE INDEX "ServiceCredential_expiresAt_idx" ON "ServiceCredential"("expiresAt");

-- AddForeignKey
ALTER TABLE "ServiceCredential" ADD CONSTRAINT "ServiceCredential_serviceId_fkey" FOREIGN KEY ("serviceId") REFERENCES "HostedService"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "ServiceCredential" ADD CONSTRAINT "ServiceCredential_accountId_fkey" FOREIGN KEY ("accountId") REFERENCES "Account"("id") ON DELETE CASCADE ON UPDATE CASCADE;
