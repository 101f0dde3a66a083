-- CreateTable
CREATE TABLE "DesktopLink" (
    "id" TEXT NOT NULL,
    "accountId" TEXT NOT NULL,
    "instanceId" TEXT NOT NULL,
    "tokenHash" TEXT NOT NULL,
    "createdAt" TIMESTAMP(3) NOT NULL,
    "expiresAt" TIMESTAMP(3) NOT NULL,
    "revokedAt" TIMESTAMP(3),

    CONSTRAINT "DesktopLink_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "DesktopSession" (
    "id" TEXT NOT NULL,
    "accountId" TEXT NOT NULL,
    "instanceId" TEXT NOT NULL,
    "linkId" TEXT NOT NULL,
    "credentialId" TEXT NOT NULL,
    "createdAt" TIMESTAMP(3) NOT NULL,
    "expiresAt" TIMESTAMP(3) NOT NULL,
    "endedAt" TIMESTAMP(3),

    CONSTRAINT "DesktopSession_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE UNIQUE INDEX "DesktopLink_tokenHash_key" ON "DesktopLink"("tokenHash");

-- CreateIndex
CREATE INDEX "DesktopLink_instanceId_idx" ON "DesktopLink"("instanceId");

-- CreateIndex
CREATE INDEX "DesktopSession_accountId_idx" ON "DesktopSession"("accountId");

-- CreateIndex
CREATE INDEX "DesktopSession_linkId_credentialId_idx" ON "DesktopSession"("linkId", "credentialId");

-- AddForeignKey
ALTER TABLE "DesktopLink" ADD CONSTRAINT "DesktopLink_accountId_fkey" FOREIGN KEY ("accountId") REFERENCES "Account"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "DesktopLink" ADD CONSTRAINT "DesktopLink_instanceId_fkey" FOREIGN KEY ("instanceId") REFERENCES "Instance"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "DesktopSession" ADD CONSTRAINT "DesktopSession_accountId_fkey" FOREIGN KEY ("accountId") REFERENCES "Account"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "DesktopSession" ADD CONSTRAINT "DesktopSession_instanceId_fkey" FOREIGN KEY ("instanceId") REFERENCES "Instance"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "DesktopSession" ADD CONSTRAINT "DesktopSession_linkId_fkey" FOREIGN KEY ("linkId") REFERENCES "DesktopLink"("id") ON DELETE CASCADE ON UPDATE CASCADE;
